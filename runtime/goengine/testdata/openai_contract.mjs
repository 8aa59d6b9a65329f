// openai_contract.mjs: the reviewer's contract (issue 18) through the
// official OpenAI JavaScript client, unchanged. Usage: node
// openai_contract.mjs CLIENT_DIR BASE_URL N. Prints one JSON object:
//   objects: the parsed structured outputs of N random prompts (a JSON
//     schema with bounded strings), or the parse error of each failure;
//   logprobs: the logprobs content of one greedy answer with top_logprobs 5,
//     and the messages it answered; streamedLogprobs: the same streamed;
//   tool: the forced call's name and arguments, not streamed and streamed.
import {join} from "node:path";
import {pathToFileURL} from "node:url";

const [dir, baseURL, n] = process.argv.slice(2);
const {default: OpenAI} = await import(pathToFileURL(join(dir, "node_modules/openai/index.mjs")).href);
const client = new OpenAI({baseURL, apiKey: "unused", maxRetries: 0});
const out = {objects: [], failures: []};

// A small deterministic generator, so that a failure can be replayed.
let state = 20261129;
const rand = () => (state = (state * 1103515245 + 12345) % 2147483648) / 2147483648;
const words = ["card", "night", "transfer", "amount", "merchant", "refund", "wallet", "login", "country", "device", "velocity", "chargeback"];
const prompt = () => Array.from({length: 3 + Math.floor(rand() * 12)}, () => words[Math.floor(rand() * words.length)]).join(" ");

const schema = {
	type: "object",
	properties: {
		risk_level: {type: "integer", minimum: 1, maximum: 5},
		reason: {type: "string", maxLength: 16},
		flagged: {type: "boolean"},
		signals: {type: "array", items: {type: "string", enum: ["night", "amount", "device", "country"]}, maxItems: 3},
	},
	required: ["risk_level", "reason", "flagged", "signals"],
	additionalProperties: false,
};
for (let i = 0; i < Number(n); i++) {
	const messages = [{role: "system", content: "Rate the fraud risk as JSON."}, {role: "user", content: prompt()}];
	const c = await client.chat.completions.create({
		model: "tiny", messages, temperature: 1, seed: i, max_tokens: 400,
		response_format: {type: "json_schema", json_schema: {name: "risk", strict: true, schema}},
	});
	const text = c.choices[0].message.content;
	try {
		out.objects.push(JSON.parse(text));
	} catch (e) {
		out.failures.push({text, finish: c.choices[0].finish_reason, error: String(e)});
	}
}

const lpMessages = [{role: "user", content: "Transaction of 900 EUR at 3am from a new device. Risk?"}];
const lp = await client.chat.completions.create({model: "tiny", messages: lpMessages, temperature: 0, max_tokens: 8, logprobs: true, top_logprobs: 5});
out.logprobs = {messages: lpMessages, content: lp.choices[0].logprobs.content, text: lp.choices[0].message.content};
// The same answer streamed: its entries arrive with the chunks that show their text.
const lpStream = await client.chat.completions.create({model: "tiny", messages: lpMessages, temperature: 0, max_tokens: 8, logprobs: true, top_logprobs: 5, stream: true});
out.streamedLogprobs = {content: [], text: ""};
for await (const ch of lpStream) {
	const c = ch.choices[0];
	out.streamedLogprobs.text += c?.delta?.content ?? "";
	out.streamedLogprobs.content.push(...(c?.logprobs?.content ?? []));
}

const tools = [{
	type: "function",
	function: {
		name: "report_risk",
		description: "Report the risk of a transaction.",
		parameters: {
			type: "object",
			properties: {
				risk_level: {type: "integer", minimum: 1, maximum: 5},
				channel: {type: "string", enum: ["card", "wire", "wallet"]},
				note: {type: "string", maxLength: 10},
			},
			required: ["risk_level", "channel", "note"],
		},
	},
}];
const toolMessages = [{role: "user", content: "Card payment of 900 EUR at 3am. Report the risk."}];
const tool_choice = {type: "function", function: {name: "report_risk"}};
const tc = await client.chat.completions.create({model: "tiny", messages: toolMessages, tools, tool_choice, temperature: 1, seed: 5, max_tokens: 200});
const call = tc.choices[0].message.tool_calls[0];
out.tool = {name: call.function.name, arguments: call.function.arguments, id: call.id, finish: tc.choices[0].finish_reason, content: tc.choices[0].message.content};

const stream = await client.chat.completions.create({model: "tiny", messages: toolMessages, tools, tool_choice, temperature: 1, seed: 5, max_tokens: 200, stream: true});
const calls = [];
let finish = null;
for await (const ch of stream) {
	const d = ch.choices[0]?.delta;
	for (const t of d?.tool_calls ?? []) {
		calls[t.index] ??= {name: "", arguments: "", id: ""};
		if (t.id) calls[t.index].id = t.id;
		if (t.function?.name) calls[t.index].name += t.function.name;
		if (t.function?.arguments) calls[t.index].arguments += t.function.arguments;
	}
	finish = ch.choices[0]?.finish_reason ?? finish;
}
out.streamedTool = {calls, finish};
process.stdout.write(JSON.stringify(out) + "\n");
