// tests/hub/split.mjs SRC.safetensors OUTDIR: writes the tensors of SRC as two
// shards, model-00001-of-00002.safetensors and model-00002-of-00002.safetensors
// (tensors alternating between them), plus model.safetensors.index.json: the
// sharded layout transformers writes, for the hub tests.
import fs from "node:fs";
import path from "node:path";

const [src, out] = process.argv.slice(2);
const buf = fs.readFileSync(src);
const hlen = Number(buf.readBigUInt64LE(0));
const header = JSON.parse(buf.subarray(8, 8 + hlen).toString("utf8"));
const data = buf.subarray(8 + hlen);
const names = Object.keys(header).filter((k) => k !== "__metadata__").sort();
const shards = [[], []];
names.forEach((n, i) => shards[i % 2].push(n));
const files = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"];
const weightMap = {};
let total = 0;
shards.forEach((list, s) => {
  const h = { __metadata__: { format: "pt" } };
  const parts = [];
  let off = 0;
  for (const n of list) {
    const t = header[n];
    const bytes = data.subarray(t.data_offsets[0], t.data_offsets[1]);
    h[n] = { dtype: t.dtype, shape: t.shape, data_offsets: [off, off + bytes.length] };
    parts.push(bytes);
    off += bytes.length;
    weightMap[n] = files[s];
  }
  total += off;
  let hj = Buffer.from(JSON.stringify(h), "utf8");
  const pad = (8 - (hj.length % 8)) % 8;  // the data starts 8-aligned, as safetensors writes it
  hj = Buffer.concat([hj, Buffer.alloc(pad, 0x20)]);
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(hj.length));
  fs.writeFileSync(path.join(out, files[s]), Buffer.concat([len, hj, ...parts]));
});
fs.writeFileSync(path.join(out, "model.safetensors.index.json"),
  JSON.stringify({ metadata: { total_size: total }, weight_map: weightMap }, null, 2));
