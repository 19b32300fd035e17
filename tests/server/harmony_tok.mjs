// tests/server/harmony_tok.mjs OUT: writes a tokenizer for the gpt_oss fixture model
// (vocabulary 512) that speaks harmony: tests/server/tok512 plus gpt-oss's special
// tokens (<|start|>, <|channel|>, <|message|>, <|call|>, <|constrain|>, <|return|>; its
// <|end|> is there already) and the harmony-style chat template of the jinja fixtures.
import fs from 'node:fs';

const out = process.argv[2];
const tok = JSON.parse(fs.readFileSync('tests/server/tok512/tokenizer.json', 'utf8'));
let next = Math.max(...Object.values(tok.model.vocab)) + 1;
for (const content of ['<|start|>', '<|channel|>', '<|message|>', '<|call|>', '<|constrain|>', '<|return|>']) {
  tok.added_tokens.push({ id: next, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true });
  tok.model.vocab[content] = next++;
}
const cfg = JSON.parse(fs.readFileSync('tests/server/tok512/tokenizer_config.json', 'utf8'));
cfg.chat_template = fs.readFileSync('tests/fixtures/tokenizers/jinja/harmony_style.jinja', 'utf8');
cfg.eos_token = '<|return|>';
fs.mkdirSync(out, { recursive: true });
fs.writeFileSync(`${out}/tokenizer.json`, JSON.stringify(tok));
fs.writeFileSync(`${out}/tokenizer_config.json`, JSON.stringify(cfg));
