package api

import (
	"bytes"
	"encoding/json"
	"strings"
)

// Tool calls in the model's output. Qwen models write them in one of two
// forms, both between <tool_call> tags, which their chat templates both
// describe to the model and render in past turns:
//
//	<tool_call>                              <tool_call>
//	{"name": "f", "arguments": {"a": 1}}     <function=f>
//	</tool_call>                             <parameter=a>
//	                                         1
//	                                         </parameter>
//	                                         </function>
//	                                         </tool_call>
//
// JSON (Qwen2.5, Qwen3; llama.cpp's "Hermes 2 Pro" format) and XML
// (Qwen3-Coder, Qwen3.5; llama.cpp's "Qwen3-Coder" format). The parser
// reads text as it streams and turns it into events: content outside the
// calls, the start of a call (its name), and fragments of its arguments.
// The concatenated fragments of a call are its arguments as compact JSON:
// in the JSON form the "arguments" value without insignificant white space,
// streamed as it arrives; in the XML form an object of the parameters, each
// added when its </parameter> arrives, its value the text trimmed of
// surrounding white space, taken as JSON unless the tool's schema declares
// the parameter a string (or it is not valid JSON), as llama.cpp and vLLM
// read it.
//
// The same parser serves streamed and whole answers, so both give the same
// calls. Text it cannot read as a call (an unknown form, a JSON head with
// "arguments" before "name", a call cut off before its name) is kept as
// content, tags included; junk after a call's arguments and before its
// closing tag is dropped. White space between calls and after the last is
// dropped; white space before the first call is dropped once a call
// follows.

const (
	tagOpen       = "<tool_call>"
	tagClose      = "</tool_call>"
	xmlFuncOpen   = "<function="
	xmlFuncClose  = "</function>"
	xmlParamOpen  = "<parameter="
	xmlParamClose = "</parameter>"
	thinkEnd      = "</think>"

	// maxHead bounds the text read as a JSON call's head before the
	// arguments ({"name": …, "arguments":), so that re-reading it as it
	// grows stays cheap.
	maxHead = 8 << 10
	// maxName bounds an XML call's function name.
	maxName = 256
)

// toolEvent is one thing the parser found.
type toolEvent struct {
	// Content is text outside tool calls (when Start and Args are unset).
	Content string
	// Start begins call Index with Name; Args continues call Index.
	Start bool
	Index int
	Name  string
	Args  string
}

type parseState uint8

const (
	psContent   parseState = iota // outside calls
	psOpen                        // after <tool_call>: which form?
	psJSONHead                    // {"name": "f", "arguments":
	psJSONArgs                    // the arguments value
	psJSONTail                    // up to </tool_call>
	psXMLName                     // <function=NAME>
	psXMLParams                   // <parameter=K>V</parameter>… </function>
	psXMLTail                     // up to </tool_call>
	psRaw                         // an unreadable call: up to </tool_call>
)

// toolParser turns model output into toolEvents. It is not safe for
// concurrent use.
type toolParser struct {
	// stringParams[name][param] is true for parameters the tool's schema
	// declares as strings (XML form values stay text).
	stringParams map[string]map[string]bool
	// skipThinkEnd drops a "</think>" that opens the text (the prompt left
	// the model in a reasoning block that a forced call closes at once).
	skipThinkEnd bool

	st       parseState
	buf      string // text not yet consumed
	raw      strings.Builder
	calls    int // calls started
	heldWS   string
	after    bool // a call ended: white space that follows is dropped
	args     argScanner
	xmlArgs  int    // parameters written in the current XML call
	xmlName  string // current XML call's tool
	scanFrom int    // bytes of buf already searched for a closing tag
	out      []toolEvent
}

func newToolParser(stringParams map[string]map[string]bool) *toolParser {
	return &toolParser{stringParams: stringParams}
}

// Calls is the number of calls started so far.
func (p *toolParser) Calls() int { return p.calls }

// Push consumes text and returns the events it completes.
func (p *toolParser) Push(text string) []toolEvent {
	p.out = p.out[:0]
	p.buf += text
	for p.step() {
	}
	return p.out
}

// Finish ends the text and returns the last events.
func (p *toolParser) Finish() []toolEvent {
	p.out = p.out[:0]
	for p.step() {
	}
	switch p.st {
	case psContent:
		if p.after {
			p.content(strings.TrimLeft(p.buf, " \t\r\n"))
		} else {
			p.content(p.heldWS + p.buf)
		}
	case psOpen, psJSONHead, psXMLName, psRaw:
		// Cut off before the call was readable: it stays text.
		p.content(p.heldWS + p.raw.String() + p.buf)
	case psXMLParams:
		if p.xmlArgs == 0 {
			p.emitArgs("{")
		}
	}
	p.buf, p.heldWS = "", ""
	p.raw.Reset()
	return p.out
}

func (p *toolParser) content(s string) {
	if s == "" {
		return
	}
	if n := len(p.out); n > 0 && !p.out[n-1].Start && p.out[n-1].Args == "" {
		p.out[n-1].Content += s
		return
	}
	p.out = append(p.out, toolEvent{Content: s})
}

func (p *toolParser) emitArgs(s string) {
	if s == "" {
		return
	}
	i := p.calls - 1
	if n := len(p.out); n > 0 && (p.out[n-1].Start || p.out[n-1].Args != "") && p.out[n-1].Index == i {
		p.out[n-1].Args += s
		return
	}
	p.out = append(p.out, toolEvent{Index: i, Args: s})
}

func (p *toolParser) start(name string) {
	p.out = append(p.out, toolEvent{Start: true, Index: p.calls, Name: name})
	p.calls++
	p.heldWS = "" // white space before a call is not content
}

// consume moves n bytes of buf into the current call's raw text.
func (p *toolParser) consume(n int) {
	p.raw.WriteString(p.buf[:n])
	p.buf = p.buf[n:]
	p.scanFrom = 0
}

// step makes one transition; it reports whether another may follow.
func (p *toolParser) step() bool {
	switch p.st {
	case psContent:
		return p.stepContent()
	case psOpen:
		s := strings.TrimLeft(p.buf, " \t\r\n")
		switch {
		case s == "":
			p.consume(len(p.buf)) // white space: kept in raw only, so the buffer does not grow
			return false
		case s[0] == '{':
			p.st = psJSONHead
		case strings.HasPrefix(s, xmlFuncOpen):
			p.consume(len(p.buf) - len(s) + len(xmlFuncOpen))
			p.st = psXMLName
		case strings.HasPrefix(xmlFuncOpen, s):
			return false // maybe "<function=" still coming
		default:
			p.st = psRaw
		}
		return true
	case psJSONHead:
		name, n, status := jsonHead(p.buf)
		switch status {
		case headMore:
			return false
		case headBad:
			p.st = psRaw
			return true
		}
		p.consume(n)
		p.start(name)
		p.args = argScanner{}
		p.st = psJSONArgs
		return true
	case psJSONArgs:
		frag, n, done := p.args.feed(p.buf)
		p.emitArgs(frag)
		p.consume(n)
		if done {
			p.st = psJSONTail
			return true
		}
		return false
	case psJSONTail, psXMLTail:
		return p.skipTo(tagClose, func() { p.endCall() })
	case psXMLName:
		i := strings.IndexByte(p.buf, '>')
		if i < 0 {
			if strings.ContainsAny(p.buf, "\n<") || len(p.buf) > maxName {
				p.st = psRaw
				return true
			}
			return false
		}
		name := strings.TrimSpace(p.buf[:i])
		if name == "" || i > maxName || strings.ContainsAny(p.buf[:i], "\n<") {
			p.st = psRaw
			return true
		}
		p.consume(i + 1)
		p.start(name)
		p.xmlName, p.xmlArgs = name, 0
		p.st = psXMLParams
		return true
	case psXMLParams:
		return p.stepXMLParam()
	case psRaw:
		return p.skipTo(tagClose, func() {
			body := p.raw.String()
			p.raw.Reset()
			inner := strings.TrimSuffix(strings.TrimPrefix(body, tagOpen), tagClose)
			if name, args, ok := p.parseWhole(inner); ok {
				p.start(name)
				p.emitArgs(args)
				p.after = true
			} else {
				p.content(body)
				p.after = false
			}
			p.st = psContent
		})
	}
	return false
}

// stepContent emits text up to the next <tool_call>, holding back a
// suffix that may begin one and trailing white space (dropped if a call
// follows); white space right after a call is dropped.
func (p *toolParser) stepContent() bool {
	const ws = " \t\r\n"
	if p.skipThinkEnd {
		switch {
		case strings.HasPrefix(p.buf, thinkEnd):
			p.buf = p.buf[len(thinkEnd):]
			p.after = true // and the white space after it
		case strings.HasPrefix(thinkEnd, p.buf):
			return false
		}
		p.skipThinkEnd = false
	}
	i := strings.Index(p.buf, tagOpen)
	var text string
	if i >= 0 {
		text = p.buf[:i]
	} else {
		keep := 0
		for n := min(len(tagOpen)-1, len(p.buf)); n > 0; n-- {
			if strings.HasSuffix(p.buf, tagOpen[:n]) {
				keep = n
				break
			}
		}
		text = p.buf[:len(p.buf)-keep]
	}
	p.buf = p.buf[len(text):]
	if p.after {
		text = strings.TrimLeft(text, ws)
		p.after = text == ""
	}
	trimmed := strings.TrimRight(text, ws)
	if i >= 0 {
		if trimmed != "" {
			p.content(p.heldWS + trimmed)
		}
		p.heldWS = ""
		p.raw.Reset()
		p.consume(len(tagOpen))
		p.st = psOpen
		return true
	}
	if trimmed == "" {
		p.heldWS += text
		return false
	}
	p.content(p.heldWS + trimmed)
	p.heldWS = text[len(trimmed):]
	return false
}

// skipTo drops text up to and including tag, then calls done; it
// reports whether it found the tag.
func (p *toolParser) skipTo(tag string, done func()) bool {
	from := max(0, p.scanFrom-len(tag)+1)
	i := strings.Index(p.buf[from:], tag)
	if i < 0 {
		p.scanFrom = len(p.buf)
		return false
	}
	p.consume(from + i + len(tag))
	done()
	return true
}

func (p *toolParser) endCall() {
	p.raw.Reset()
	p.after = true
	p.st = psContent
}

// stepXMLParam reads one <parameter=K>V</parameter>, or </function>.
func (p *toolParser) stepXMLParam() bool {
	s := strings.TrimLeft(p.buf, " \t\r\n")
	switch {
	case s == "":
		p.consume(len(p.buf))
		return false
	case strings.HasPrefix(s, xmlFuncClose):
		p.consume(len(p.buf) - len(s) + len(xmlFuncClose))
		if p.xmlArgs == 0 {
			p.emitArgs("{}")
		} else {
			p.emitArgs("}")
		}
		p.st = psXMLTail
		return true
	case strings.HasPrefix(s, tagClose):
		// </function> left out: the call ends anyway.
		p.consume(len(p.buf) - len(s) + len(tagClose))
		if p.xmlArgs == 0 {
			p.emitArgs("{}")
		} else {
			p.emitArgs("}")
		}
		p.endCall()
		return true
	case strings.HasPrefix(s, xmlParamOpen):
		rest := s[len(xmlParamOpen):]
		gt := strings.IndexByte(rest, '>')
		if gt < 0 {
			return false
		}
		off := len(p.buf) - len(rest) + gt + 1 // the value's offset in buf
		from := max(off, p.scanFrom-len(xmlParamClose)+1)
		end := strings.Index(p.buf[from:], xmlParamClose)
		if end < 0 {
			p.scanFrom = len(p.buf)
			return false
		}
		end += from
		p.xmlParam(strings.TrimSpace(rest[:gt]), p.buf[off:end])
		p.consume(end + len(xmlParamClose))
		return true
	case strings.HasPrefix(xmlFuncClose, s) || strings.HasPrefix(xmlParamOpen, s) || strings.HasPrefix(tagClose, s):
		return false
	}
	// Junk between parameters: skip to the next tag.
	i := strings.IndexByte(s[1:], '<')
	if i < 0 {
		p.consume(len(p.buf))
		return false
	}
	p.consume(len(p.buf) - len(s) + 1 + i)
	return true
}

func (p *toolParser) xmlParam(key, val string) {
	sep := ","
	if p.xmlArgs == 0 {
		sep = "{"
	}
	p.xmlArgs++
	k, _ := json.Marshal(key)
	p.emitArgs(sep + string(k) + ":" + xmlValue(strings.TrimSpace(val), p.stringParams[p.xmlName][key]))
}

// xmlValue is the JSON of an XML parameter's text: the text as JSON when
// it is valid JSON and the parameter is not a string, else a JSON string.
func xmlValue(v string, isString bool) string {
	if !isString && json.Valid([]byte(v)) {
		var buf bytes.Buffer
		if json.Compact(&buf, []byte(v)) == nil {
			return buf.String()
		}
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// parseWhole reads a JSON call body with its keys in any order (the XML
// form is read as it streams, or not at all).
func (p *toolParser) parseWhole(body string) (name, args string, ok bool) {
	body = strings.TrimSpace(body)
	if strings.HasPrefix(body, "{") {
		var call struct {
			Name      *string         `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		}
		dec := json.NewDecoder(strings.NewReader(body))
		if dec.Decode(&call) != nil || call.Name == nil || *call.Name == "" || dec.More() {
			return "", "", false
		}
		args := "{}"
		if len(call.Arguments) > 0 {
			var buf bytes.Buffer
			if json.Compact(&buf, call.Arguments) != nil {
				return "", "", false
			}
			args = buf.String()
		}
		return *call.Name, args, true
	}
	return "", "", false
}

type headStatus uint8

const (
	headMore headStatus = iota
	headOK
	headBad
)

// jsonHead reads `{"name": "NAME", "arguments":` at the start of s (white
// space allowed between the tokens): the name, the bytes read, or that more
// text is needed or that s does not start so.
func jsonHead(s string) (name string, n int, st headStatus) {
	i := 0
	ws := func() {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
			i++
		}
	}
	lit := func(c byte) headStatus {
		ws()
		switch {
		case i == len(s):
			return headMore
		case s[i] != c:
			return headBad
		}
		i++
		return headOK
	}
	str := func() (string, headStatus) {
		ws()
		if i == len(s) {
			return "", headMore
		}
		if s[i] != '"' {
			return "", headBad
		}
		for j := i + 1; j < len(s); j++ {
			switch s[j] {
			case '\\':
				j++
			case '"':
				var v string
				if json.Unmarshal([]byte(s[i:j+1]), &v) != nil {
					return "", headBad
				}
				i = j + 1
				return v, headOK
			}
		}
		return "", headMore
	}
	steps := []func() headStatus{
		func() headStatus { return lit('{') },
		func() headStatus {
			k, st := str()
			if st == headOK && k != "name" {
				return headBad
			}
			return st
		},
		func() headStatus { return lit(':') },
		func() headStatus {
			v, st := str()
			if st == headOK && v == "" {
				return headBad
			}
			name = v
			return st
		},
		func() headStatus { return lit(',') },
		func() headStatus {
			k, st := str()
			if st == headOK && k != "arguments" {
				return headBad
			}
			return st
		},
		func() headStatus { return lit(':') },
	}
	for _, f := range steps {
		if st := f(); st != headOK {
			if st == headMore && len(s) > maxHead {
				st = headBad // not a head a model writes: stop re-reading it
			}
			return "", 0, st
		}
	}
	ws()
	if i > maxHead {
		return "", 0, headBad
	}
	return name, i, headOK
}

// argScanner finds the end of one JSON value fed in pieces and returns it
// without insignificant white space. It does not validate: a malformed
// value ends where its brackets balance.
type argScanner struct {
	started bool
	scalar  bool // a number or literal: ends at a delimiter
	depth   int
	inStr   bool
	esc     bool
}

// feed reads s; it returns the compacted text of the value read, the bytes
// consumed and whether the value is complete.
func (a *argScanner) feed(s string) (frag string, n int, done bool) {
	var sb strings.Builder
	for n = 0; n < len(s); n++ {
		c := s[n]
		if a.inStr {
			sb.WriteByte(c)
			switch {
			case a.esc:
				a.esc = false
			case c == '\\':
				a.esc = true
			case c == '"':
				a.inStr = false
				if a.depth == 0 {
					return sb.String(), n + 1, true
				}
			}
			continue
		}
		if !a.started {
			switch c {
			case ' ', '\t', '\r', '\n':
				continue
			}
			a.started = true
			switch c {
			case '{', '[':
				a.depth++
			case '"':
				a.inStr = true
			default:
				a.scalar = true
			}
			sb.WriteByte(c)
			continue
		}
		if a.scalar {
			switch c {
			case ' ', '\t', '\r', '\n', ',', '}', ']', '<':
				return sb.String(), n, true
			}
			sb.WriteByte(c)
			continue
		}
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		case '"':
			a.inStr = true
		case '{', '[':
			a.depth++
		case '}', ']':
			a.depth--
		}
		sb.WriteByte(c)
		if a.depth == 0 {
			return sb.String(), n + 1, true
		}
	}
	return sb.String(), n, false
}
