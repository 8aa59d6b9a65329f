// openai_client.mjs: drives the gateway with the official OpenAI JavaScript client, unchanged.
// Usage: node openai_client.mjs CLIENT_DIR BASE_URL API_KEY. Prints one JSON object with what each call returned.
import {join} from "node:path";
import {pathToFileURL} from "node:url";

const [dir, baseURL, apiKey] = process.argv.slice(2);
const {default: OpenAI} = await import(pathToFileURL(join(dir, "node_modules/openai/index.mjs")).href);
const client = new OpenAI({baseURL, apiKey, maxRetries: 0});
const out = {};
const messages = [{role: "user", content: "Is this transaction fraud?"}];

const c = await client.chat.completions.create({model: "tiny", messages, max_tokens: 50});
out.chat = {content: c.choices[0].message.content, finish: c.choices[0].finish_reason, object: c.object};

const stream = await client.chat.completions.create({model: "tiny", messages, stream: true, stream_options: {include_usage: true}});
let text = "", finish = null, usage = null, chunks = 0;
for await (const ch of stream) {
	chunks++;
	if (ch.usage) usage = ch.usage;
	if (ch.choices.length > 0) {
		text += ch.choices[0].delta.content ?? "";
		finish = ch.choices[0].finish_reason ?? finish;
	}
}
out.stream = {content: text, finish, usage, chunks};

const models = await client.models.list();
out.models = models.data.map((m) => m.id);

try {
	await new OpenAI({baseURL, apiKey: "wrong", maxRetries: 0}).models.list();
	out.badKey = null;
} catch (e) {
	out.badKey = {status: e.status, code: e.code};
}
process.stdout.write(JSON.stringify(out) + "\n");
