// Conformance check of phonellm's fake Hub (pipeline/publish/hubtest) with the
// official @huggingface/hub client. Run by pipeline/publish/jsclient_test.go:
//   1. list and download what phonellm uploaded, checking size and sha256;
//   2. create a repo and commit files of its own (multipart LFS, basic LFS,
//      regular) with the LFS path (useXet: false);
// and print one JSON report on stdout. Any mismatch exits non-zero.
//
// Environment: HUB_URL, HF_TOKEN, REPO (uploaded by phonellm), EXPECT (JSON
// [{path, size, sha256}]), JS_REPO (repo to create), OUT_DIR (where the files
// uploaded here are written so the Go test can hash them).
import { createHash } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { commit, createRepo, downloadFile, listFiles } from "@huggingface/hub";

const env = (k) => {
	const v = process.env[k];
	if (!v) throw new Error(`missing env ${k}`);
	return v;
};
const hubUrl = env("HUB_URL");
const accessToken = env("HF_TOKEN");
const repo = { type: "model", name: env("REPO") };
const expect = JSON.parse(env("EXPECT"));
const jsRepo = { type: "model", name: env("JS_REPO") };
const outDir = env("OUT_DIR");

const sha256 = (buf) => createHash("sha256").update(buf).digest("hex");

const report = { listed: [], downloaded: [], uploaded: [] };

for await (const entry of listFiles({ repo, hubUrl, accessToken, recursive: true })) {
	report.listed.push({ path: entry.path, size: entry.size, lfsOid: entry.lfs?.oid ?? null });
}
for (const want of expect) {
	const listed = report.listed.find((e) => e.path === want.path);
	if (!listed) throw new Error(`listFiles: ${want.path} missing`);
	if (listed.size !== want.size) throw new Error(`listFiles: ${want.path} size ${listed.size}, want ${want.size}`);
	if (want.lfs && listed.lfsOid !== want.sha256) throw new Error(`listFiles: ${want.path} lfs oid ${listed.lfsOid}, want ${want.sha256}`);
	const blob = await downloadFile({ repo, path: want.path, hubUrl, accessToken });
	if (!blob) throw new Error(`downloadFile: ${want.path} not found`);
	const buf = Buffer.from(await blob.arrayBuffer());
	const got = sha256(buf);
	if (buf.length !== want.size || got !== want.sha256) {
		throw new Error(`downloadFile: ${want.path} has ${buf.length} bytes sha256 ${got}, want ${want.size} ${want.sha256}`);
	}
	report.downloaded.push({ path: want.path, size: buf.length, sha256: got });
}

// Deterministic content: a multipart-sized GGUF-named file, a basic LFS one,
// and a small text file.
function bytes(n, seed) {
	const b = Buffer.alloc(n);
	let x = seed >>> 0;
	for (let i = 0; i < n; i++) {
		x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
		b[i] = x >>> 24;
	}
	return b;
}
const files = [
	{ path: "js-model-Q4_K_M.gguf", content: bytes(1536 * 1024 + 77, 1) },
	{ path: "js-small.gguf", content: bytes(100 * 1024, 2) },
	{ path: "notes.txt", content: Buffer.from("uploaded by @huggingface/hub\n") },
];
await createRepo({ repo: jsRepo, hubUrl, accessToken });
const out = await commit({
	repo: jsRepo,
	hubUrl,
	accessToken,
	title: "upload from the official JS client",
	useXet: false,
	operations: files.map((f) => ({ operation: "addOrUpdate", path: f.path, content: new Blob([f.content]) })),
});
report.commit = out?.commit?.oid ?? null;
for (const f of files) {
	writeFileSync(join(outDir, f.path), f.content);
	report.uploaded.push({ path: f.path, size: f.content.length, sha256: sha256(f.content) });
}
process.stdout.write(JSON.stringify(report) + "\n");
