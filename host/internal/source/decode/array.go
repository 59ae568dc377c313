package decode

// maxArrayDepth is PostgreSQL's MAXDIM. A deeper literal cannot come from
// the server; refusing it also bounds the parser's recursion.
const maxArrayDepth = 6

// appendArray converts the text form of an array whose elements are of kind
// elem, e.g. {1,2,NULL} or {{"a b","x\"y"},{c,d}}, to a JSON array. scratch
// is a reusable buffer for unescaping quoted elements; the possibly grown
// buffer is returned for the next call.
//
// It reports false, with b truncated to its original length, for anything
// that is not a plain array literal, notably literals with explicit bounds
// ("[0:1]={1,2}"), which a JSON array cannot express; the caller then emits
// the text form as a string.
func appendArray(b, text []byte, elem kind, scratch []byte) ([]byte, []byte, bool) {
	mark := len(b)
	p := arrayParser{text: text, elem: elem, scratch: scratch}
	b, ok := p.appendArray(b, 0)
	if !ok || p.pos != len(text) {
		return b[:mark], p.scratch, false
	}
	return b, p.scratch, true
}

type arrayParser struct {
	text    []byte
	pos     int
	elem    kind
	scratch []byte
}

// appendArray parses one '{…}' level starting at p.pos.
func (p *arrayParser) appendArray(b []byte, depth int) ([]byte, bool) {
	if depth >= maxArrayDepth || p.pos >= len(p.text) || p.text[p.pos] != '{' {
		return b, false
	}
	p.pos++
	b = append(b, '[')
	if p.pos < len(p.text) && p.text[p.pos] == '}' {
		p.pos++
		return append(b, ']'), true
	}
	for first := true; ; first = false {
		if !first {
			b = append(b, ',')
		}
		var ok bool
		if b, ok = p.appendItem(b, depth); !ok {
			return b, false
		}
		if p.pos >= len(p.text) {
			return b, false
		}
		switch p.text[p.pos] {
		case ',':
			p.pos++
		case '}':
			p.pos++
			return append(b, ']'), true
		default:
			return b, false
		}
	}
}

// appendItem parses one element: a nested array, a quoted element or an
// unquoted one.
func (p *arrayParser) appendItem(b []byte, depth int) ([]byte, bool) {
	if p.pos >= len(p.text) {
		return b, false
	}
	switch p.text[p.pos] {
	case '{':
		return p.appendArray(b, depth+1)
	case '"':
		p.pos++
		p.scratch = p.scratch[:0]
		for p.pos < len(p.text) {
			c := p.text[p.pos]
			switch c {
			case '"':
				p.pos++
				return appendValue(b, p.elem, p.scratch), true
			case '\\':
				p.pos++
				if p.pos >= len(p.text) {
					return b, false
				}
				c = p.text[p.pos]
			}
			p.scratch = append(p.scratch, c)
			p.pos++
		}
		return b, false
	}
	start := p.pos
	for p.pos < len(p.text) {
		c := p.text[p.pos]
		if c == ',' || c == '}' {
			break
		}
		// PostgreSQL quotes every element that contains one of these (and
		// whitespace); seeing one unquoted means this is not its output.
		if c == '{' || c == '"' || c == '\\' || c == ' ' {
			return b, false
		}
		p.pos++
	}
	v := p.text[start:p.pos]
	switch {
	case len(v) == 0:
		return b, false
	case len(v) == 4 && v[0]|0x20 == 'n' && v[1]|0x20 == 'u' && v[2]|0x20 == 'l' && v[3]|0x20 == 'l':
		// Only an unquoted NULL is null; "NULL" in quotes is the string.
		return append(b, "null"...), true
	}
	return appendValue(b, p.elem, v), true
}
