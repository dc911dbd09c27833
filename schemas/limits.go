package schemas

import (
	"bytes"
	"fmt"
)

// Bounds on a message before it is decoded (security rule 5). The bounds on
// each string and list are in the schemas.
const (
	// MaxMessageBytes is the largest command or event accepted, in bytes.
	MaxMessageBytes = 1 << 20
	// MaxDepth is the deepest nesting of objects and arrays accepted: a
	// message that is one object holding one array has depth 2.
	MaxDepth = 32
	// MaxNumberLength bounds the characters of one JSON number, and
	// MaxNumberExponent the magnitude of its exponent: a validator compares
	// numbers exactly, and an unbounded one costs unbounded time to read.
	MaxNumberLength   = 100
	MaxNumberExponent = 400
	// MaxFieldErrors is the most offending fields one *Error lists; the
	// message says how many more there were.
	MaxFieldErrors = 100
)

// CheckBounds checks b before anything decodes it: it fails with Code
// CodeTooLarge when b is longer than maxBytes, and with Code CodeInvalid
// when objects and arrays nest deeper than maxDepth. It scans b once,
// allocates nothing unless it fails, and ignores brackets inside strings. It
// does not check that b is valid JSON: decoding does. A maxBytes or maxDepth
// of 0 or less means the default, MaxMessageBytes or MaxDepth.
func CheckBounds(b []byte, maxBytes, maxDepth int) error {
	if maxBytes <= 0 {
		maxBytes = MaxMessageBytes
	}
	if maxDepth <= 0 {
		maxDepth = MaxDepth
	}
	if len(b) > maxBytes {
		return &Error{Code: CodeTooLarge, Message: fmt.Sprintf(
			"the message is %d bytes; at most %d are allowed (store large payloads as artifacts)", len(b), maxBytes)}
	}
	depth := 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			end := stringEnd(b, i+1)
			if end < 0 {
				return nil // unterminated: the decoder reports it
			}
			i = end
		case '{', '[':
			depth++
			if depth > maxDepth {
				return &Error{Code: CodeInvalid, Message: fmt.Sprintf(
					"the message nests objects and arrays %d deep at byte %d; at most %d levels are allowed", depth, i, maxDepth)}
			}
		case '}', ']':
			if depth > 0 {
				depth--
			}
		}
	}
	return nil
}

// stringEnd returns the index of the quote that ends the string whose
// contents start at b[from], or -1 when the string does not end. A quote is
// escaped when an odd number of backslashes precede it.
func stringEnd(b []byte, from int) int {
	for {
		j := bytes.IndexByte(b[from:], '"')
		if j < 0 {
			return -1
		}
		q := from + j
		n := 0
		for k := q - 1; k >= from && b[k] == '\\'; k-- {
			n++
		}
		if n%2 == 0 {
			return q
		}
		from = q + 1
	}
}
