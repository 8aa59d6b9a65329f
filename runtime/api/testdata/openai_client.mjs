// openai_client.mjs: drives phonellm's API with the official OpenAI
// JavaScript client, unchanged. Usage: node openai_client.mjs CLIENT_DIR
// BASE_URL API_KEY. Prints one JSON object with what each call returned.
import {join} from "node:path";
import {pathToFileURL} from "node:url";

const [dir, baseURL, apiKey] = process.argv.slice(2);
const {default: OpenAI} = await import(pathToFileURL(join(dir, "node_modules/openai/index.mjs")).href);
const client = new OpenAI({baseURL, apiKey, maxRetries: 0});
const out = {};
const messages = [{role: "system", content: "Be terse."}, {role: "user", content: "hi"}];

const c = await client.chat.completions.create({model: "fake", messages, max_tokens: 50, temperature: 0});
out.chat = {content: c.choices[0].message.content, finish: c.choices[0].finish_reason, usage: c.usage, object: c.object};

const stream = await client.chat.completions.create({model: "fake", messages, stream: true, stream_options: {include_usage: true}});
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

const s = await client.chat.completions.create({model: "fake", messages, stop: ["lo"]});
out.stop = {content: s.choices[0].message.content, finish: s.choices[0].finish_reason};

const t = await client.completions.create({model: "fake", prompt: "abc", max_tokens: 4});
out.completion = {text: t.choices[0].text, finish: t.choices[0].finish_reason};

const models = await client.models.list();
out.models = models.data.map((m) => m.id);

const errOf = async (f) => {
	try {
		await f();
		return null;
	} catch (e) {
		return {status: e.status, type: e.type, code: e.code, param: e.param, message: e.message};
	}
};
out.badModel = await errOf(() => client.chat.completions.create({model: "gpt-4o", messages}));
out.tooLong = await errOf(() => client.chat.completions.create({model: "fake", messages: [{role: "user", content: "x".repeat(5000)}]}));
out.badKey = await errOf(() => new OpenAI({baseURL, apiKey: "wrong", maxRetries: 0}).models.list());
process.stdout.write(JSON.stringify(out) + "\n");
