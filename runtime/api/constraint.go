package api

import (
	"bytes"
	"container/list"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"unicode/utf8"

	"github.com/phonellm/phonellm/internal/httpx"
	"github.com/phonellm/phonellm/runtime/engine"
	"github.com/phonellm/phonellm/runtime/grammar"
)

// Constrained output. A request may limit what the model generates in one
// of these ways, enforced token by token while sampling (runtime/grammar):
//
//   - response_format {"type": "json_object"}: a JSON object; llama-server's
//     extension {"type": "json_object", "schema": {...}} takes a schema;
//   - response_format {"type": "json_schema", "json_schema": {"schema":
//     {...}}} (OpenAI's structured outputs; "strict" or not, the schema is
//     always enforced, as by llama-server), or llama-server's top-level
//     "json_schema": {...};
//   - grammar: a GBNF grammar (llama-server's field and syntax);
//   - choices: ["RISK_LEVEL: 1", …, "RISK_LEVEL: 5"], phonellm's
//     extension: the answer is exactly one of the strings (any tokenization
//     of it), and generation stops as soon as one is complete. llama-server
//     does not know the field and ignores it: a fleet whose replicas run
//     llama-server (the phones) needs the same constraint as a grammar,
//     root ::= "RISK_LEVEL: 1" | … (runtime/grammar.Choices writes it).
//
// At most one of them per request. The JSON Schema subset is llama.cpp's
// (runtime/grammar); a keyword outside it is refused by name rather than
// ignored. Errors in any of them are 400s naming the field.

// maxChoiceBytes bounds the total text of a choices list.
const maxChoiceBytes = 256 << 10

// constraintCache keeps the grammars of recent requests: clients that ask
// the same question repeatedly (an eval, a fleet of reviewers) send the
// same schema or choices every time. Bounded in entries and in the bytes of
// their sources.
type constraintCache struct {
	mu    sync.Mutex
	ll    *list.List // of *cacheEntry, most recent first
	index map[string]*list.Element
	bytes int
}

type cacheEntry struct {
	key string
	g   *grammar.Grammar
}

const (
	cacheEntries = 64
	cacheBytes   = 8 << 20
)

func newConstraintCache() *constraintCache {
	return &constraintCache{ll: list.New(), index: map[string]*list.Element{}}
}

// get returns the grammar under key, compiling it with build on a miss.
// Errors are not cached.
func (c *constraintCache) get(key string, build func() (*grammar.Grammar, error)) (*grammar.Grammar, error) {
	c.mu.Lock()
	if el, ok := c.index[key]; ok {
		c.ll.MoveToFront(el)
		g := el.Value.(*cacheEntry).g
		c.mu.Unlock()
		return g, nil
	}
	c.mu.Unlock()
	g, err := build()
	if err != nil {
		return nil, err
	}
	if len(key) > cacheBytes/4 {
		return g, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.index[key]; !ok {
		c.index[key] = c.ll.PushFront(&cacheEntry{key: key, g: g})
		c.bytes += len(key)
	}
	for c.ll.Len() > cacheEntries || c.bytes > cacheBytes {
		el := c.ll.Back()
		e := el.Value.(*cacheEntry)
		c.ll.Remove(el)
		delete(c.index, e.key)
		c.bytes -= len(e.key)
	}
	return g, nil
}

var jsonObjectGrammar = sync.OnceValue(grammar.JSONObject)

// constraint builds the request's output constraint (nil when it has
// none).
func (f *samplingFields) constraint(cache *constraintCache) (engine.Constraint, *httpx.Error) {
	var given []string
	var schema json.RawMessage
	schemaParam := ""
	if rf := f.ResponseFormat; rf != nil {
		switch rf.Type {
		case "", "text":
		case "json_object":
			given = append(given, "response_format")
			schemaParam = "response_format.schema"
			schema = rf.Schema
		case "json_schema":
			given = append(given, "response_format")
			schemaParam = "response_format.json_schema.schema"
			var js struct {
				Schema json.RawMessage `json:"schema"`
			}
			if err := json.Unmarshal(rf.JSONSchema, &js); err != nil {
				return nil, httpx.BadRequest("response_format.json_schema", "", "Invalid 'response_format.json_schema': want an object with a \"schema\".")
			}
			schema = js.Schema
			if isNull(schema) {
				schema = json.RawMessage(`{}`) // no schema: any JSON value, as llama-server reads it
			}
		default:
			return nil, httpx.BadRequest("response_format.type", "", "Invalid 'response_format.type': %q; want text, json_object or json_schema.", httpx.CapText(rf.Type, 80))
		}
	}
	if !isNull(f.JSONSchema) {
		given = append(given, "json_schema")
		schemaParam, schema = "json_schema", f.JSONSchema
	}
	if f.Grammar != nil && *f.Grammar != "" {
		given = append(given, "grammar")
	}
	if f.Choices != nil {
		given = append(given, "choices")
	}
	switch len(given) {
	case 0:
		return nil, nil
	case 1:
	default:
		return nil, httpx.BadRequest(given[1], "", "'%s' and '%s' both constrain the output; give one.", given[0], given[1])
	}
	switch given[0] {
	case "grammar":
		src := *f.Grammar
		g, err := cache.get("g"+src, func() (*grammar.Grammar, error) { return grammar.Parse(src) })
		if err != nil {
			return nil, httpx.BadRequest("grammar", "invalid_grammar", "Invalid 'grammar': %s", httpx.CapText(err.Error(), 512))
		}
		return g, nil
	case "choices":
		return choicesConstraint(f.Choices, cache)
	}
	if isNull(schema) {
		return jsonObjectGrammar(), nil
	}
	if !json.Valid(schema) {
		return nil, httpx.BadRequest(schemaParam, "invalid_json_schema", "Invalid '%s': not JSON.", schemaParam)
	}
	var key bytes.Buffer
	key.WriteByte('s')
	_ = json.Compact(&key, schema)
	g, err := cache.get(key.String(), func() (*grammar.Grammar, error) { return grammar.FromJSONSchema(schema) })
	if err != nil {
		return nil, httpx.BadRequest(schemaParam, "invalid_json_schema", "Invalid '%s': %s", schemaParam, httpx.CapText(err.Error(), 512))
	}
	return g, nil
}

func choicesConstraint(choices []string, cache *constraintCache) (engine.Constraint, *httpx.Error) {
	if len(choices) == 0 {
		return nil, httpx.BadRequest("choices", "", "Invalid 'choices': give at least one answer.")
	}
	if len(choices) > grammar.MaxChoices {
		return nil, httpx.BadRequest("choices", "array_above_max_length", "Invalid 'choices': at most %d answers, got %d.", grammar.MaxChoices, len(choices))
	}
	n := 0
	for i, c := range choices {
		if n += len(c); n > maxChoiceBytes {
			return nil, httpx.BadRequest("choices", "string_above_max_length", "Invalid 'choices': more than %d bytes of answers.", maxChoiceBytes)
		}
		if !utf8.ValidString(c) {
			return nil, httpx.BadRequest(fmt.Sprintf("choices[%d]", i), "", "Invalid 'choices[%d]': not valid UTF-8.", i)
		}
	}
	key, _ := json.Marshal(choices)
	g, err := cache.get("c"+string(key), func() (*grammar.Grammar, error) { return grammar.Choices(choices) })
	if err != nil {
		return nil, httpx.BadRequest("choices", "", "Invalid 'choices': %s", httpx.CapText(err.Error(), 512))
	}
	return g, nil
}

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || bytes.Equal(raw, []byte("null"))
}

// constraintParam names the field that set a request's constraint, for
// errors found while generating.
func (f *samplingFields) constraintParam() string {
	switch {
	case f.Choices != nil:
		return "choices"
	case f.Grammar != nil && *f.Grammar != "":
		return "grammar"
	case !isNull(f.JSONSchema):
		return "json_schema"
	case f.ResponseFormat != nil:
		return "response_format"
	}
	return "tool_choice"
}

// constraintError answers a constraint the model could not follow: its
// vocabulary cannot spell what the grammar requires, a token reference it
// lacks, or the grammar's state space outgrew the matcher's bounds.
func constraintError(err error, param string) *httpx.Error {
	return httpx.BadRequest(param, "invalid_grammar", "The '%s' constraint cannot be followed with this model: %s",
		param, httpx.CapText(err.Error(), 512))
}

// isConstraintError reports a failed constraint (at set-up or while
// generating).
func isConstraintError(err error) bool {
	var ce *engine.ConstraintError
	if errors.As(err, &ce) {
		return true
	}
	var ge *grammar.Error
	return errors.As(err, &ge)
}
