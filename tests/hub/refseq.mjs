// tests/hub/refseq.mjs REF.safetensors NAME FROM TO: prints tensor NAME's I32 values
// [FROM, TO) comma separated (the transformers token sequences of a fixture's ref).
import fs from "node:fs";
const [file, name, from, to] = process.argv.slice(2);
const b = fs.readFileSync(file);
const hlen = Number(b.readBigUInt64LE(0));
const t = JSON.parse(b.subarray(8, 8 + hlen).toString("utf8"))[name];
const data = b.subarray(8 + hlen + t.data_offsets[0], 8 + hlen + t.data_offsets[1]);
const v = [];
for (let i = Number(from); i < Number(to); i++) v.push(data.readInt32LE(4 * i));
console.log(v.join(","));
