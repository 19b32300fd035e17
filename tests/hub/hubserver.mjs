// tests/hub/hubserver.mjs REPOS FAULTS LOG: a local stand-in for the Hugging Face
// hub, in the hub's URL layout, for tests/cli_hub.sh (127.0.0.1 only; prints its
// port on stdout).
//   GET /api/models/ORG/NAME/revision/REV[?blobs=true]  -> {id, sha, siblings[{rfilename,
//       blobId, size, lfs: {sha256, size, pointerSize}}]}  (lfs for *.safetensors)
//   GET|HEAD /ORG/NAME/resolve/REV/FILE  -> the file (X-Repo-Commit, ETag = git blob
//       sha1), or for LFS files a 302 to /cdn/SHA256 with X-Linked-Etag (the sha256)
//       and X-Linked-Size, as the hub answers
//   GET /cdn/SHA256  -> the bytes, with Range support (206)
// REPOS/ORG/NAME/ holds a repository's files; its commit is sha1(ORG/NAME), and the
// revisions "main" and "v1" point at it. Repositories under REPOS/gated/ answer 401
// (X-Error-Code: GatedRepo) to a resolve without "Authorization: Bearer secret".
// Repositories under REPOS/noblobs/ list file names only (no blobId, size, lfs), so
// a client has to ask each file's metadata with HEAD.
// Unknown repositories: 404 RepoNotFound; unknown revisions: 404 RevisionNotFound.
// FAULTS, read at every request, is JSON: {"drop": {FILE: N}} sends half of the
// asked bytes of FILE and then cuts the connection, N times; {"corrupt": [FILE]}
// serves FILE with one byte changed. LOG gets one line per request: METHOD PATH RANGE.
import crypto from "node:crypto";
import fs from "node:fs";
import http from "node:http";
import path from "node:path";

const [repos, faultsPath, logPath] = process.argv.slice(2);
const sha = (alg, b) => crypto.createHash(alg).update(b).digest("hex");
const gitBlob = (b) => sha("sha1", Buffer.concat([Buffer.from(`blob ${b.length}\0`), b]));
const isLfs = (f) => f.endsWith(".safetensors");

function faults() {
  try { return JSON.parse(fs.readFileSync(faultsPath, "utf8")); } catch { return {}; }
}
function saveFaults(f) { fs.writeFileSync(faultsPath, JSON.stringify(f)); }

function listFiles(dir, pre = "") {
  let out = [];
  for (const e of fs.readdirSync(dir, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
    const rel = pre ? `${pre}/${e.name}` : e.name;
    if (e.isDirectory()) out = out.concat(listFiles(path.join(dir, e.name), rel));
    else out.push(rel);
  }
  return out;
}

function repo(org, name) {
  const dir = path.join(repos, org, name);
  if (!/^[\w.-]+$/.test(org) || !/^[\w.-]+$/.test(name) || !fs.existsSync(dir)) return null;
  return { dir, id: `${org}/${name}`, commit: sha("sha1", Buffer.from(`${org}/${name}`)), gated: org === "gated" };
}

function revisionOk(r, rev) { return rev === "main" || rev === "v1" || rev === r.commit; }

function fail(res, code, errCode, msg) {
  res.writeHead(code, { "Content-Type": "application/json", "X-Error-Code": errCode, "X-Error-Message": msg });
  res.end(JSON.stringify({ error: msg }));
}

// Sends body (a Buffer) honouring Range; under a "drop" fault sends half and cuts.
function sendBytes(req, res, body, file, extra) {
  const f = faults();
  let start = 0, end = body.length - 1, code = 200;
  const m = /^bytes=(\d+)-(\d*)$/.exec(req.headers.range || "");
  if (m) {
    start = Number(m[1]);
    if (m[2]) end = Math.min(Number(m[2]), end);
    if (start > end) { res.writeHead(416, { "Content-Range": `bytes */${body.length}` }); return res.end(); }
    code = 206;
  }
  if ((f.corrupt || []).includes(file)) { body = Buffer.from(body); body[Math.floor(body.length / 2)] ^= 0xff; }
  const headers = { ...extra, "Content-Length": end - start + 1, "Accept-Ranges": "bytes",
                    "Content-Type": "application/octet-stream" };
  if (code === 206) headers["Content-Range"] = `bytes ${start}-${end}/${body.length}`;
  res.writeHead(code, headers);
  if (req.method === "HEAD") return res.end();
  const part = body.subarray(start, end + 1);
  if (f.drop && f.drop[file] > 0) {
    f.drop[file]--;
    saveFaults(f);
    res.write(part.subarray(0, Math.floor(part.length / 2)), () => setTimeout(() => req.socket.destroy(), 50));
    return;
  }
  res.end(part);
}

const server = http.createServer((req, res) => {
  const url = new URL(req.url, "http://x");
  const p = decodeURIComponent(url.pathname);
  fs.appendFileSync(logPath, `${req.method} ${url.pathname} ${req.headers.range || "-"}\n`);
  let m;
  if ((m = /^\/api\/models\/([^/]+)\/([^/]+)\/revision\/(.+)$/.exec(p))) {
    const r = repo(m[1], m[2]);
    if (!r) return fail(res, 404, "RepoNotFound", "Repository not found");
    if (!revisionOk(r, m[3])) return fail(res, 404, "RevisionNotFound", `Invalid rev id: ${m[3]}`);
    const blobs = url.searchParams.get("blobs") === "true" && m[1] !== "noblobs"; // noblobs/*: names only
    const siblings = listFiles(r.dir).map((f) => {
      const b = fs.readFileSync(path.join(r.dir, f));
      const s = { rfilename: f };
      if (blobs) {
        s.blobId = gitBlob(b);
        s.size = b.length;
        if (isLfs(f)) s.lfs = { sha256: sha("sha256", b), size: b.length, pointerSize: 134 };
      }
      return s;
    });
    res.writeHead(200, { "Content-Type": "application/json" });
    return res.end(JSON.stringify({ id: r.id, modelId: r.id, sha: r.commit, siblings }));
  }
  if ((m = /^\/([^/]+)\/([^/]+)\/resolve\/([^/]+)\/(.+)$/.exec(p))) {
    const r = repo(m[1], m[2]);
    if (!r) return fail(res, 404, "RepoNotFound", "Repository not found");
    if (!revisionOk(r, m[3])) return fail(res, 404, "RevisionNotFound", `Invalid rev id: ${m[3]}`);
    if (r.gated && req.headers.authorization !== "Bearer secret")
      return fail(res, 401, "GatedRepo", `Access to model ${r.id} is restricted. You must have access to it and be authenticated to access it. Please log in.`);
    const file = m[4];
    const fp = path.join(r.dir, file);
    if (file.includes("..") || !fs.existsSync(fp)) return fail(res, 404, "EntryNotFound", `${file} does not exist`);
    const b = fs.readFileSync(fp);
    if (isLfs(file)) {
      const h = sha("sha256", b);
      res.writeHead(302, { Location: `/cdn/${h}?file=${encodeURIComponent(file)}&repo=${encodeURIComponent(r.id)}`,
                           "X-Repo-Commit": r.commit, "X-Linked-Etag": `"${h}"`, "X-Linked-Size": b.length,
                           ETag: `"${gitBlob(Buffer.from("pointer"))}"` });
      return res.end();
    }
    return sendBytes(req, res, b, file, { "X-Repo-Commit": r.commit, ETag: `"${gitBlob(b)}"` });
  }
  if ((m = /^\/cdn\/([0-9a-f]{64})$/.exec(p))) {
    const [org, name] = (url.searchParams.get("repo") || "/").split("/");
    const r = repo(org, name), file = url.searchParams.get("file") || "";
    if (!r || file.includes("..") || !fs.existsSync(path.join(r.dir, file))) return fail(res, 404, "NotFound", "no such blob");
    return sendBytes(req, res, fs.readFileSync(path.join(r.dir, file)), file, { ETag: '"cdn-etag-not-the-sha"' });
  }
  fail(res, 404, "NotFound", "no such route");
});
server.listen(0, "127.0.0.1", () => console.log(server.address().port));
