// tests/server/tools.mjs PORT: tool calls through the openai npm client against
// `celer serve` with models/default, which writes KJV text and never a call on its
// own: with tool_choice naming a function (or "required") the grammar makes it call
// one, and the calls must come back as message.tool_calls whose arguments parse as
// JSON (JSON.parse, not our parser) and satisfy the tool's schema (checked here by
// hand, keyword by keyword); streamed, the delta.tool_calls fragments reassemble to
// the same call; under "auto" it answers in text; bad tools are 400s naming the field.
import { openaiClass, check, kase, done, bad } from './lib.mjs';

const [port, mode] = process.argv.slice(2);
const OpenAI = openaiClass();
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'x', maxRetries: 0, timeout: 120000 });

const weather = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Weather at a place',
    parameters: {
      type: 'object',
      properties: {
        location: { type: 'string', maxLength: 12 },
        unit: { enum: ['celsius', 'fahrenheit'] },
        days: { type: 'integer' },
      },
      required: ['location', 'unit'],
      additionalProperties: false,
    },
  },
};
const flag = {
  type: 'function',
  function: {
    name: 'set_flag',
    parameters: { type: 'object', properties: { on: { type: 'boolean' }, tags: { type: 'array', items: { enum: ['a', 'b'] }, maxItems: 2 } }, required: ['on'], additionalProperties: false },
  },
};

// The schema checks, written out for these two tools.
function valid(name, args) {
  const keys = Object.keys(args);
  if (name === 'get_weather') {
    return typeof args.location === 'string' && [...args.location].length <= 12 && ['celsius', 'fahrenheit'].includes(args.unit) &&
      (args.days === undefined || Number.isInteger(args.days)) && keys.every((k) => ['location', 'unit', 'days'].includes(k));
  }
  if (name === 'set_flag') {
    return typeof args.on === 'boolean' && (args.tags === undefined || (Array.isArray(args.tags) && args.tags.length <= 2 && args.tags.every((t) => t === 'a' || t === 'b'))) &&
      keys.every((k) => ['on', 'tags'].includes(k));
  }
  return false;
}

const ask = (extra) => client.chat.completions.create({
  model: 'default', messages: [{ role: 'user', content: 'What is the weather in Paris?' }], max_tokens: 700, parallel_tool_calls: false, ...extra,
});

function checkCall(name, c, allowed) {
  const tc = c.message?.tool_calls ?? [];
  let args = null;
  try { args = JSON.parse(tc[0]?.function?.arguments); } catch (e) { args = null; }
  check(name, c.finish_reason === 'tool_calls' && tc.length === 1 && tc[0].type === 'function' && /^call_[A-Za-z0-9]{24}$/.test(tc[0].id) &&
    allowed.includes(tc[0].function.name) && args && typeof args === 'object' && valid(tc[0].function.name, args) && c.message.content === null,
    JSON.stringify(c));
  return tc[0];
}

const named = { type: 'function', function: { name: 'get_weather' } };

// `harmony`: the gpt_oss fixture (random weights) with a harmony tokenizer: the calls
// go through special-token markers (kept in the text for the parser) and the grammar's
// special-token literals.
if (mode === 'harmony') {
  const place = { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { location: { type: 'string', maxLength: 8 } }, required: ['location'], additionalProperties: false } } };
  const hask = (extra) => client.chat.completions.create({ model: 'default', messages: [{ role: 'user', content: 'Weather?' }], max_tokens: 300, tools: [place, flag], ...extra });
  const hvalid = (tc) => {
    let a = null;
    try { a = JSON.parse(tc?.function?.arguments); } catch (e) { a = null; }
    return a && typeof a.location === 'string' && [...a.location].length <= 8 && Object.keys(a).every((k) => k === 'location');
  };
  for (const seed of [1, 2]) {
    await kase(`harmony seed ${seed}`, async () => {
      const r = await hask({ tool_choice: named, seed });
      const c = r.choices[0], tc = c.message.tool_calls ?? [];
      check(`harmony seed ${seed}: a valid call`, c.finish_reason === 'tool_calls' && tc.length === 1 && tc[0].function.name === 'get_weather' &&
        hvalid(tc[0]) && c.message.content === null, JSON.stringify(c));
      const s = await hask({ tool_choice: named, seed, stream: true });
      const calls = [];
      let content = '', finish = null;
      for await (const ch of s) {
        for (const x of ch.choices) {
          if (x.delta?.content) content += x.delta.content;
          for (const d of x.delta?.tool_calls ?? []) {
            if (d.id) calls[d.index] = { name: d.function.name, arguments: d.function.arguments ?? '' };
            else calls[d.index].arguments += d.function?.arguments ?? '';
          }
          if (x.finish_reason) finish = x.finish_reason;
        }
      }
      check(`harmony seed ${seed}: streamed, the same call and no markup`, calls.length === 1 && tc[0] && calls[0].name === 'get_weather' &&
        calls[0].arguments === tc[0].function.arguments && finish === 'tool_calls' && content === '', `${JSON.stringify(calls)} ${finish} ${JSON.stringify(content)}`);
    });
  }
  done();
}
const plain = {};
for (const seed of [1, 2, 3, 4]) {
  await kase(`named tool_choice, seed ${seed}`, async () => {
    const r = await ask({ tools: [weather, flag], tool_choice: named, seed });
    plain[seed] = checkCall(`named tool_choice, seed ${seed}: a valid get_weather call`, r.choices[0], ['get_weather']);
  });
}

await kase('required tool_choice', async () => {
  const r = await ask({ tools: [flag, weather], tool_choice: 'required', seed: 7 });
  checkCall('required tool_choice: a valid call of a declared tool', r.choices[0], ['get_weather', 'set_flag']);
});

await kase('streaming', async () => {
  for (const seed of [1, 2]) {
    const s = await ask({ tools: [weather, flag], tool_choice: named, seed, stream: true });
    const calls = [];
    let content = '', finish = null, frames = 0;
    for await (const ch of s) {
      for (const c of ch.choices) {
        if (c.delta?.content) content += c.delta.content;
        for (const d of c.delta?.tool_calls ?? []) {
          frames++;
          if (d.id) calls[d.index] = { id: d.id, type: d.type, name: d.function.name, arguments: d.function.arguments ?? '' };
          else calls[d.index].arguments += d.function?.arguments ?? '';
        }
        if (c.finish_reason) finish = c.finish_reason;
      }
    }
    const p = plain[seed];
    check(`streaming seed ${seed}: the chunks reassemble to the call`, calls.length === 1 && p && calls[0].name === p.function.name &&
      calls[0].arguments === p.function.arguments && calls[0].type === 'function' && finish === 'tool_calls' && content === '' && frames >= 2,
      `${JSON.stringify(calls)} ${finish} ${JSON.stringify(content)} vs ${JSON.stringify(p)}`);
  }
});

await kase('auto: text', async () => {
  const r = await ask({ tools: [weather], tool_choice: 'auto', seed: 1, max_tokens: 24, temperature: 0 });
  const c = r.choices[0];
  check('auto: the model answers in text', !c.message.tool_calls && typeof c.message.content === 'string' && c.message.content.length > 0 &&
    !c.message.content.includes('<tool_call>'), JSON.stringify(c));
});

await kase('a tool message goes back through the template', async () => {
  const r = await client.chat.completions.create({
    model: 'default', max_tokens: 8, temperature: 0, tools: [weather],
    messages: [
      { role: 'user', content: 'Weather?' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"location":"Paris","unit":"celsius"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: '{"temp": 21}' },
    ],
  });
  check('a tool message goes back through the template', r.choices[0].message.role === 'assistant', JSON.stringify(r));
});

async function status(name, body, want) {
  await kase(name, async () => {
    try {
      await client.chat.completions.create({ model: 'default', messages: [{ role: 'user', content: 'x' }], max_tokens: 4, ...body });
      bad(name, 'accepted');
    } catch (e) {
      check(name, e.status === 400 && String(e.message).includes(want), `${e.status} ${e.message}`);
    }
  });
}
await status('400: a bad function name', { tools: [weather, { type: 'function', function: { name: 'no spaces' } }] }, 'tools[1].function.name');
await status('400: tool_choice naming no tool', { tools: [weather], tool_choice: { type: 'function', function: { name: 'nope' } } }, 'tool_choice.function.name');
await status('400: an unsupported schema keyword when a call is required',
  { tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { n: { type: 'number', multipleOf: 2 } } } } }], tool_choice: 'required' },
  'multipleOf');
await status('400: a tool message without tool_call_id', { messages: [{ role: 'user', content: 'x' }, { role: 'tool', content: 'y' }] }, 'messages[1].tool_call_id');

done();
