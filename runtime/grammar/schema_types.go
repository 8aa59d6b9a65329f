package grammar

import (
	"math/big"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// object is the rule of an object schema: required properties in schema
// order, then any subset of the optional ones in schema order, then (when
// additionalProperties allows them) other keys.
func (c *schemaConv) object(s *jsonValue, ruleName, path string) (string, error) {
	props := s.get("properties")
	if props != nil && props.kind != '{' {
		return "", errAt(pointer(path, "properties"), "must be an object")
	}
	addl := s.get("additionalProperties")
	if props == nil && !s.has("required") && (addl == nil || addl.kind == 'b' && addl.b) {
		// Any object (llama.cpp: an object schema without properties).
		if ruleName == "root" {
			return c.rootPrimitive("object"), nil
		}
		return c.addRule(ruleName, c.primitive("object", "object")), nil
	}
	required := map[string]bool{}
	if r := s.get("required"); r != nil {
		if r.kind != '[' {
			return "", errAt(pointer(path, "required"), "must be an array of property names")
		}
		for _, x := range r.arr {
			if x.kind != 's' {
				return "", errAt(pointer(path, "required"), "must be an array of property names")
			}
			if props.get(x.str) == nil {
				return "", errAt(pointer(path, "required"), "required property %q has no schema in properties", x.str)
			}
			required[x.str] = true
		}
	}
	return c.objectRule(props, required, addl, ruleName, path)
}

func (c *schemaConv) objectRule(props *jsonValue, required map[string]bool, addl *jsonValue, ruleName, path string) (string, error) {
	base := ruleName
	if base == "root" {
		base = ""
	}
	var req, opt []string // kv rule names
	var names []string
	if props != nil {
		for i, k := range props.keys {
			vr, err := c.visit(props.vals[i], join(base, k), pointer(pointer(path, "properties"), k))
			if err != nil {
				return "", err
			}
			kv := c.addRule(join(base, k)+"-kv", Literal(jsonString(k))+" space \":\" space "+vr)
			if required[k] {
				req = append(req, kv)
			} else {
				opt = append(opt, kv)
			}
			names = append(names, k)
		}
	}
	extra := ""
	if addl != nil && (addl.kind == '{' || addl.kind == 'b' && addl.b) {
		sub := join(base, "additional")
		var vr string
		if addl.kind == '{' {
			var err error
			if vr, err = c.visit(addl, sub+"-value", pointer(path, "additionalProperties")); err != nil {
				return "", err
			}
		} else {
			vr = c.primitive("value", "value")
		}
		var kr string
		if len(names) == 0 {
			kr = c.primitive("string", "string")
		} else {
			kr = c.addRule(sub+"-k", c.notStrings(names))
		}
		extra = c.addRule(sub+"-kv", kr+" \":\" space "+vr)
	} else if addl != nil && addl.kind != 'b' {
		return "", errAt(pointer(path, "additionalProperties"), "must be a boolean or a schema")
	}

	var sb strings.Builder
	sb.WriteString(`"{" space `)
	for i, kv := range req {
		if i > 0 {
			sb.WriteString(` "," space `)
		}
		sb.WriteString(kv)
	}
	if len(opt) > 0 || extra != "" {
		// rest[i]: any subset of opt[i:] in order, then extra keys, each
		// after a comma.
		rest := make([]string, len(opt)+1)
		tail := ""
		if extra != "" {
			tail = `("," space ` + extra + `)*`
		}
		rest[len(opt)] = tail
		for i := len(opt) - 1; i >= 0; i-- {
			body := strings.TrimSpace(`("," space ` + opt[i] + `)? ` + rest[i+1])
			rest[i] = c.addRule(join(base, "rest"+strconv.Itoa(i)), body)
		}
		if len(req) > 0 {
			sb.WriteString(" ")
			if len(opt) > 0 {
				sb.WriteString(rest[0])
			} else {
				sb.WriteString(tail)
			}
		} else {
			var firsts []string
			for i, kv := range opt {
				firsts = append(firsts, strings.TrimSpace(kv+" "+rest[i+1]))
			}
			if extra != "" {
				firsts = append(firsts, extra+" "+tail)
			}
			sb.WriteString("(" + strings.Join(firsts, " | ") + ")?")
		}
	}
	sb.WriteString(` "}" space`)
	return c.addRule(ruleName, sb.String()), nil
}

// jsonString is s encoded as a JSON string.
func jsonString(s string) string {
	var sb strings.Builder
	encodeJSONString(&sb, s)
	return sb.String()
}

// notStrings is a JSON string rule matching every string but the given
// ones (the keys additional properties may not reuse): a trie of the
// excluded strings where each node may leave the trie with any other
// character, and may end unless an excluded string ends there. Escape
// sequences always count as leaving the trie.
func (c *schemaConv) notStrings(excluded []string) string {
	type node struct {
		kids map[rune]*node
		end  bool
	}
	root := &node{kids: map[rune]*node{}}
	for _, s := range excluded {
		n := root
		for _, r := range s {
			k := n.kids[r]
			if k == nil {
				k = &node{kids: map[rune]*node{}}
				n.kids[r] = k
			}
			n = k
		}
		n.end = true
	}
	char := c.primitive("char", "char")
	var walk func(n *node) string
	walk = func(n *node) string {
		var rs []rune
		for r := range n.kids {
			rs = append(rs, r)
		}
		slices.Sort(rs)
		var alts []string
		var other strings.Builder
		other.WriteString(`[^"\\\x7F\x00-\x1F`)
		for _, r := range rs {
			k := n.kids[r]
			alt := classChar(r)
			if len(k.kids) > 0 {
				alt = "[" + alt + "] " + walk(k)
			} else if k.end {
				alt = "[" + alt + "] " + char + "+"
			}
			alts = append(alts, alt)
			other.WriteString(classChar(r))
		}
		other.WriteString(`] ` + char + `* | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4}) ` + char + `*`)
		alts = append(alts, other.String())
		s := "(" + strings.Join(alts, " | ") + ")"
		if !n.end {
			s += "?"
		}
		return s
	}
	return `"\"" ` + walk(root) + ` "\"" space`
}

// classChar writes r for use inside a GBNF character class.
func classChar(r rune) string {
	switch {
	case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		return string(r)
	case r <= 0xFF:
		return `\x` + hex(uint32(r), 2)
	case r <= 0xFFFF:
		return `\u` + hex(uint32(r), 4)
	}
	return `\U` + hex(uint32(r), 8)
}

func hex(v uint32, n int) string {
	s := strconv.FormatUint(uint64(v), 16)
	return strings.Repeat("0", n-len(s)) + s
}

// array is the rule of an array schema.
func (c *schemaConv) array(s *jsonValue, ruleName, path string) (string, error) {
	lo, _, err := count(s, "minItems", path)
	if err != nil {
		return "", err
	}
	hi, hasHi, err := count(s, "maxItems", path)
	if err != nil {
		return "", err
	}
	if !hasHi {
		hi = -1
	} else if hi < lo {
		return "", errAt(pointer(path, "maxItems"), "maxItems %d below minItems %d", hi, lo)
	}
	base := ruleName
	if base == "root" {
		base = ""
	}
	items := s.get("items")
	prefix := s.get("prefixItems")
	additional := s.get("additionalItems")
	if items != nil && items.kind == '[' { // draft 4-7 tuple form
		if prefix != nil {
			return "", errAt(pointer(path, "items"), "an array of items beside prefixItems")
		}
		prefix, items = items, additional
	} else if additional != nil {
		return "", errAt(pointer(path, "additionalItems"), "additionalItems is only meaningful with an array of items")
	}
	if prefix != nil && prefix.kind != '[' {
		return "", errAt(pointer(path, "prefixItems"), "must be an array of schemas")
	}
	var tuple []string
	if prefix != nil {
		for i, it := range prefix.arr {
			if hi >= 0 && i >= hi {
				break
			}
			r, err := c.visit(it, join(base, "tuple-"+strconv.Itoa(i)), pointer(pointer(path, "prefixItems"), strconv.Itoa(i)))
			if err != nil {
				return "", err
			}
			tuple = append(tuple, r)
		}
	}
	// More items beyond the tuple: per items (a schema, or true: any value;
	// absent after a tuple: none, a valid subset; absent without one: any).
	var item string
	switch {
	case items == nil && prefix == nil, items != nil && items.kind == 'b' && items.b:
		item = c.primitive("value", "value")
	case items == nil, items.kind == 'b':
	case items.kind == '{':
		if item, err = c.visit(items, join(base, "item"), pointer(path, "items")); err != nil {
			return "", err
		}
	default:
		return "", errAt(pointer(path, "items"), "must be a schema, a boolean or an array of schemas")
	}
	moreLo, moreHi := max(lo-len(tuple), 0), hi
	if hi >= 0 {
		moreHi = hi - len(tuple)
	}
	if item == "" {
		if moreLo > 0 {
			return "", errAt(pointer(path, "minItems"), "minItems %d needs more items than the tuple's %d and no further items are allowed", lo, len(tuple))
		}
		moreHi = 0
	}
	var sb strings.Builder
	sb.WriteString(`"[" space `)
	for i, r := range tuple {
		if i > 0 {
			sb.WriteString(` "," space `)
		}
		sb.WriteString(r)
	}
	if moreHi != 0 {
		rep := repetition(item, moreLo, moreHi, `"," space`)
		if len(tuple) > 0 {
			rep = repetition(`"," space `+item, moreLo, moreHi, "")
		}
		sb.WriteString(" " + rep)
	}
	sb.WriteString(` "]" space`)
	return c.addRule(ruleName, sb.String()), nil
}

// str is the rule of a string schema.
func (c *schemaConv) str(s *jsonValue, ruleName, path string) (string, error) {
	lo, hasLo, err := count(s, "minLength", path)
	if err != nil {
		return "", err
	}
	hi, hasHi, err := count(s, "maxLength", path)
	if err != nil {
		return "", err
	}
	if hasHi && hi < lo {
		return "", errAt(pointer(path, "maxLength"), "maxLength %d below minLength %d", hi, lo)
	}
	length := hasLo || hasHi
	if p := s.get("pattern"); p != nil {
		if p.kind != 's' {
			return "", errAt(pointer(path, "pattern"), "must be a string")
		}
		if length || s.has("format") {
			return "", errAt(pointer(path, "pattern"), "pattern together with minLength, maxLength or format is not supported")
		}
		body, err := c.regex(p.str)
		if err != nil {
			return "", errAt(pointer(path, "pattern"), "%v", err)
		}
		return c.addRule(ruleName, `"\"" `+body+` "\"" space`), nil
	}
	if f := s.get("format"); f != nil {
		if f.kind != 's' {
			return "", errAt(pointer(path, "format"), "must be a string")
		}
		if length {
			return "", errAt(pointer(path, "format"), "format together with minLength or maxLength is not supported")
		}
		switch {
		case f.str == "uuid" || len(f.str) == 5 && strings.HasPrefix(f.str, "uuid") && f.str[4] >= '1' && f.str[4] <= '5':
			if ruleName == "root" {
				return c.rootPrimitive("uuid"), nil
			}
			return c.primitive("uuid", "uuid"), nil
		case f.str == "date" || f.str == "time" || f.str == "date-time":
			return c.addRule(ruleName, c.primitive(f.str+"-string", f.str+"-string")), nil
		}
		return "", errAt(pointer(path, "format"), "unsupported format %q (supported: date, time, date-time, uuid)", f.str)
	}
	if length {
		char := c.primitive("char", "char")
		if !hasHi {
			hi = -1
		}
		return c.addRule(ruleName, `"\"" `+repetition(char, lo, hi, "")+` "\"" space`), nil
	}
	if ruleName == "root" {
		return c.rootPrimitive("string"), nil
	}
	return c.primitive("string", "string"), nil
}

// number is the rule of an integer or number schema.
func (c *schemaConv) number(s *jsonValue, t, ruleName, path string) (string, error) {
	lo, hi, err := numberBounds(s, t, path)
	if err != nil {
		return "", err
	}
	if !lo.set && !hi.set {
		if ruleName == "root" {
			return c.rootPrimitive(t), nil
		}
		return c.primitive(t, t), nil
	}
	var body string
	if t == "integer" {
		body = intRangeGBNF(lo, hi)
	} else {
		body = numberRangeGBNF(lo, hi)
	}
	if body == "" {
		return "", errAt(path, "no %s lies within the bounds", t)
	}
	return c.addRule(ruleName, "("+body+") space"), nil
}

// numberBounds reads minimum/maximum/exclusiveMinimum/exclusiveMaximum
// (numbers, or draft 4's booleans). Integer bounds are folded into
// inclusive ones; number bounds must be integral.
func numberBounds(s *jsonValue, t, path string) (lo, hi bound, err error) {
	read := func(kw string) (*big.Rat, error) {
		v := s.get(kw)
		if v == nil || v.kind == 'b' {
			return nil, nil
		}
		r, ok := new(big.Rat).SetString(v.num.String())
		if v.kind != '0' || !ok {
			return nil, errAt(pointer(path, kw), "must be a number")
		}
		return r, nil
	}
	draft4 := func(kw string) (bool, error) {
		v := s.get(kw)
		if v == nil || v.kind != 'b' {
			return false, nil
		}
		return v.b, nil
	}
	min, err := read("minimum")
	if err != nil {
		return lo, hi, err
	}
	max, err := read("maximum")
	if err != nil {
		return lo, hi, err
	}
	xmin, err := read("exclusiveMinimum")
	if err != nil {
		return lo, hi, err
	}
	xmax, err := read("exclusiveMaximum")
	if err != nil {
		return lo, hi, err
	}
	xminB, _ := draft4("exclusiveMinimum")
	xmaxB, _ := draft4("exclusiveMaximum")
	side := func(kw string, incl, excl *big.Rat, exclB bool, low bool) (bound, error) {
		r, exclusive := incl, exclB
		if excl != nil {
			if r == nil || (low && excl.Cmp(r) >= 0) || (!low && excl.Cmp(r) <= 0) {
				r, exclusive = excl, true
				kw = "exclusive" + strings.ToUpper(kw[:1]) + kw[1:]
			}
		}
		if r == nil {
			return bound{}, nil
		}
		if t == "integer" {
			// Fold into an inclusive integer bound.
			q := new(big.Int).Quo(r.Num(), r.Denom()) // truncated toward zero
			f := new(big.Rat).SetInt(q)
			switch {
			case low && (f.Cmp(r) < 0 || exclusive && f.Cmp(r) == 0):
				q.Add(q, big.NewInt(1))
			case !low && (f.Cmp(r) > 0 || exclusive && f.Cmp(r) == 0):
				q.Sub(q, big.NewInt(1))
			}
			if !q.IsInt64() {
				return bound{}, errAt(pointer(path, kw), "bound outside the 64-bit integer range")
			}
			return bound{set: true, v: q.Int64()}, nil
		}
		if !r.IsInt() {
			return bound{}, errAt(pointer(path, kw), "only integral bounds are supported on numbers (use type integer, or an integral bound)")
		}
		if !r.Num().IsInt64() || r.Num().Int64() > 1<<53 || r.Num().Int64() < -(1<<53) {
			return bound{}, errAt(pointer(path, kw), "bound outside ±2^53")
		}
		return bound{set: true, v: r.Num().Int64(), exclusive: exclusive}, nil
	}
	if lo, err = side("minimum", min, xmin, xminB, true); err != nil {
		return lo, hi, err
	}
	hi, err = side("maximum", max, xmax, xmaxB, false)
	return lo, hi, err
}

// resolveRef returns the rule of a "#…" reference, converting its target
// once (recursive schemas refer back to the rule by name).
func (c *schemaConv) resolveRef(ref *jsonValue, path string) (string, error) {
	if ref.kind != 's' {
		return "", errAt(path, "must be a string")
	}
	if name, ok := c.refRules[ref.str]; ok {
		return name, nil
	}
	if !strings.HasPrefix(ref.str, "#") {
		return "", errAt(path, "reference %q: only references within the schema (#/$defs/…, #/definitions/…) are supported", ref.str)
	}
	frag, err := url.PathUnescape(ref.str[1:])
	if err != nil {
		return "", errAt(path, "reference %q: %v", ref.str, err)
	}
	target := c.lookup(frag)
	if target == nil {
		return "", errAt(path, "reference %q does not resolve within the schema", ref.str)
	}
	base := "ref" + invalidRuleChars.ReplaceAllString(frag, "-")
	name := base
	for i := 0; c.rules[name] != "" || c.reserved(name); i++ {
		name = base + strconv.Itoa(i)
	}
	c.refRules[ref.str] = name // recursive references use the name before the rule exists
	r, err := c.visit(target, name, strings.TrimPrefix(ref.str, "#"))
	if err != nil {
		return "", err
	}
	if r != name {
		c.rules[name] = r
	}
	return name, nil
}

func (c *schemaConv) reserved(name string) bool {
	for _, n := range c.refRules {
		if n == name {
			return true
		}
	}
	return false
}

// lookup follows a JSON pointer from the root; a "/$defs/X" or
// "/definitions/X" that is not at the root is searched for in nested $defs
// too (llama.cpp hoists them).
func (c *schemaConv) lookup(ptr string) *jsonValue {
	if ptr == "" {
		return c.root
	}
	if !strings.HasPrefix(ptr, "/") {
		return nil
	}
	cur := c.root
	for _, tok := range strings.Split(ptr[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch cur.kind {
		case '{':
			cur = cur.get(tok)
		case '[':
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(cur.arr) {
				cur = nil
			} else {
				cur = cur.arr[i]
			}
		default:
			cur = nil
		}
		if cur == nil {
			break
		}
	}
	if cur != nil {
		return cur
	}
	parts := strings.Split(ptr[1:], "/")
	if len(parts) == 2 && (parts[0] == "$defs" || parts[0] == "definitions") {
		return findDef(c.root, parts[0], parts[1], 0)
	}
	return nil
}

func findDef(v *jsonValue, container, name string, depth int) *jsonValue {
	if depth > maxSchemaDepth {
		return nil
	}
	switch v.kind {
	case '{':
		if d := v.get(container).get(name); d != nil {
			return d
		}
		for _, x := range v.vals {
			if d := findDef(x, container, name, depth+1); d != nil {
				return d
			}
		}
	case '[':
		for _, x := range v.arr {
			if d := findDef(x, container, name, depth+1); d != nil {
				return d
			}
		}
	}
	return nil
}

// allOf merges object schemas (properties and required of every part,
// parts given directly or by $ref), or passes a single schema through.
func (c *schemaConv) allOf(s *jsonValue, name, ruleName, path string) (string, error) {
	all := s.get("allOf")
	if all.kind != '[' || len(all.arr) == 0 {
		return "", errAt(pointer(path, "allOf"), "must be a non-empty array of schemas")
	}
	for _, k := range s.keys {
		if supported[k] && k != "allOf" && k != "type" && k != "properties" && k != "required" && k != "additionalProperties" {
			return "", errAt(pointer(path, k), "keyword %q beside allOf is not supported", k)
		}
	}
	if len(all.arr) == 1 && !s.has("properties") && !s.has("required") {
		return c.visit(all.arr[0], name, pointer(pointer(path, "allOf"), "0"))
	}
	props := &jsonValue{kind: '{'}
	required := map[string]bool{}
	var addl *jsonValue
	var merge func(part *jsonValue, p string, depth int) error
	merge = func(part *jsonValue, p string, depth int) error {
		if depth > maxSchemaDepth {
			return errAt(p, "allOf references nested deeper than %d", maxSchemaDepth)
		}
		if part.kind != '{' {
			return errAt(p, "allOf parts must be object schemas")
		}
		if ref := part.get("$ref"); ref != nil {
			if ref.kind != 's' || !strings.HasPrefix(ref.str, "#") {
				return errAt(pointer(p, "$ref"), "only references within the schema are supported")
			}
			frag, _ := url.PathUnescape(ref.str[1:])
			t := c.lookup(frag)
			if t == nil {
				return errAt(pointer(p, "$ref"), "reference %q does not resolve within the schema", ref.str)
			}
			return merge(t, ref.str[1:], depth+1)
		}
		for _, k := range part.keys {
			switch {
			case k == "properties":
				pr := part.get(k)
				if pr.kind != '{' {
					return errAt(pointer(p, k), "must be an object")
				}
				for i, pk := range pr.keys {
					if props.get(pk) != nil {
						return errAt(pointer(pointer(p, k), pk), "property %q defined by two allOf parts is not supported", pk)
					}
					props.keys = append(props.keys, pk)
					props.vals = append(props.vals, pr.vals[i])
				}
			case k == "required":
				r := part.get(k)
				if r.kind != '[' {
					return errAt(pointer(p, k), "must be an array of property names")
				}
				for _, x := range r.arr {
					if x.kind != 's' {
						return errAt(pointer(p, k), "must be an array of property names")
					}
					required[x.str] = true
				}
			case k == "type":
				if t := part.get(k); t.kind != 's' || t.str != "object" {
					return errAt(pointer(p, k), "allOf parts must be object schemas")
				}
			case k == "additionalProperties":
				addl = part.get(k)
			case k == "allOf":
				sub := part.get(k)
				if sub.kind != '[' {
					return errAt(pointer(p, k), "must be an array of schemas")
				}
				for i, x := range sub.arr {
					if err := merge(x, pointer(pointer(p, k), strconv.Itoa(i)), depth+1); err != nil {
						return err
					}
				}
			case supported[k]:
				return errAt(pointer(p, k), "keyword %q in an allOf part is not supported (only properties, required, additionalProperties)", k)
			}
		}
		return nil
	}
	self := &jsonValue{kind: '{'}
	for i, k := range s.keys {
		if k != "allOf" {
			self.keys = append(self.keys, k)
			self.vals = append(self.vals, s.vals[i])
		}
	}
	if err := merge(self, path, 0); err != nil {
		return "", err
	}
	for i, part := range all.arr {
		if err := merge(part, pointer(pointer(path, "allOf"), strconv.Itoa(i)), 0); err != nil {
			return "", err
		}
	}
	for k := range required {
		if props.get(k) == nil {
			return "", errAt(pointer(path, "allOf"), "required property %q has no schema in properties", k)
		}
	}
	return c.objectRule(props, required, addl, ruleName, path)
}
