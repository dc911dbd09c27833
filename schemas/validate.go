package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// ValidateCommand checks body, the JSON body of the command named name
// (dwr.cmd.<workspace>.<name>), against the command's schema. It returns nil
// when body is valid, or an *Error:
//   - CodeNotFound when no command is named name; the message lists the
//     commands there are;
//   - CodeTooLarge or CodeInvalid from CheckBounds, which runs first, with
//     MaxMessageBytes and MaxDepth;
//   - CodeInvalid when body is not valid UTF-8 or not one JSON value (the
//     message gives the byte offset), or when it does not match the schema,
//     repeats a key in an object, or holds a number longer than
//     MaxNumberLength or with an exponent beyond MaxNumberExponent: Fields
//     then lists every offending field (at most MaxFieldErrors) by its JSON
//     pointer;
//   - CodeInternal when an embedded schema is broken (a bug; the message
//     says no more, Error and errors.Unwrap give the cause).
func ValidateCommand(name string, body []byte) error {
	return validateAt(CommandPath(name), "the "+name+" command", body, func(r *registry) string {
		return fmt.Sprintf("there is no command %s: the commands are %s", quote(name), strings.Join(r.commands, ", "))
	})
}

// ValidateEvent checks data, the data of an event of type eventType,
// against the event's schema. It returns nil or an *Error as
// ValidateCommand does; CodeNotFound names the event types there are.
func ValidateEvent(eventType string, data []byte) error {
	return validateAt(EventPath(eventType), "the data of a "+eventType+" event", data, func(r *registry) string {
		return fmt.Sprintf("there is no event type %s: the event types are %s", quote(eventType), strings.Join(r.events, ", "))
	})
}

// Validate checks b against the schema at path, such as PathEnvelope (an
// event with its data), PathReply or CommandPath("task.create"). It returns
// nil or an *Error as ValidateCommand does; CodeNotFound when there is no
// schema at path or path is common.json, which only holds definitions.
func Validate(path string, b []byte) error {
	return validateAt(path, "the message ("+path+")", b, func(*registry) string {
		return fmt.Sprintf("there is no schema %s", quote(path))
	})
}

// validateAt checks b, which what names in messages, against the schema at
// path; when there is none (common.json holds only definitions), the error
// is CodeNotFound with the message missing gives.
func validateAt(path, what string, b []byte, missing func(*registry) string) error {
	_ = growStack(0)
	r := load()
	if r.err != nil {
		return r.internal()
	}
	s, ok := r.compiled[path]
	if !ok || path == PathCommon {
		return &Error{Code: CodeNotFound, Message: missing(r)}
	}
	return r.validate(s, what, b)
}

func (r *registry) internal() error {
	return &Error{Code: CodeInternal, Message: "the service cannot validate messages: its schemas are broken", cause: r.err}
}

// validate bounds, decodes and checks b; what names b in messages.
func (r *registry) validate(s *jsonschema.Schema, what string, b []byte) error {
	if err := CheckBounds(b, MaxMessageBytes, MaxDepth); err != nil {
		return err
	}
	v, fields, derr := decode(b)
	if derr != nil {
		derr.Message = what + " " + derr.Message
		return derr
	}
	// Numbers too long to compare cheaply are reported, then replaced by 0 so
	// that the schema can still report everything else; what it says about
	// the replaced values themselves is dropped.
	var numbers []FieldError
	v = checkNumbers(v, nil, &numbers)
	fields = append(fields, numbers...)
	bad := make(map[string]bool, len(numbers))
	for _, f := range numbers {
		bad[f.Pointer] = true
	}
	err := s.Validate(v)
	var ve *jsonschema.ValidationError
	switch {
	case err == nil:
	case errors.As(err, &ve):
		for _, f := range r.fieldErrors(ve) {
			if !bad[f.Pointer] {
				fields = append(fields, f)
			}
		}
	default:
		fields = append(fields, FieldError{Pointer: "", Message: err.Error()})
	}
	if len(fields) == 0 {
		return nil
	}
	return invalidFields(what, fields)
}

// decode decodes b as exactly one JSON value, with numbers as json.Number.
// A key repeated in an object is reported in dups: decoders differ on which
// of its values they keep, so a message that has one means different things
// to different readers.
func decode(b []byte) (v any, dups []FieldError, e *Error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, nil, &Error{Code: CodeInvalid, Message: "is empty: a JSON object was expected"}
	}
	if !utf8.Valid(b) {
		return nil, nil, &Error{Code: CodeInvalid, Message: fmt.Sprintf("is not valid UTF-8 (at byte %d)", invalidUTF8(b))}
	}
	if v, dups, ok := fastDecode(b); ok {
		return v, dups, nil
	}
	return slowDecode(b)
}

// slowDecode is decode by json.Decoder's tokens: what fastDecode does not
// read is read here, which says what is wrong with it.
func slowDecode(b []byte) (v any, dups []FieldError, e *Error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	v, err := readValue(dec, nil, &dups)
	if err != nil {
		var se *json.SyntaxError
		switch {
		case errors.As(err, &se):
			return nil, nil, &Error{Code: CodeInvalid, Message: fmt.Sprintf("is not valid JSON: %s (at byte %d)", se.Error(), se.Offset)}
		case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
			return nil, nil, &Error{Code: CodeInvalid, Message: fmt.Sprintf("is not valid JSON: it ends early (at byte %d)", len(b))}
		default:
			return nil, nil, &Error{Code: CodeInvalid, Message: fmt.Sprintf("is not valid JSON: %s (at byte %d)", err, dec.InputOffset())}
		}
	}
	end := int(dec.InputOffset())
	rest := bytes.TrimLeft(b[end:], " \t\r\n")
	if len(rest) > 0 {
		return nil, nil, &Error{Code: CodeInvalid, Message: fmt.Sprintf(
			"is not one JSON value: more data follows it (at byte %d)", len(b)-len(rest))}
	}
	return v, dups, nil
}

// readValue reads the next JSON value from dec; loc is its place, for the
// pointers of repeated keys. The recursion is as deep as the value, which
// CheckBounds bounded.
func readValue(dec *json.Decoder, loc []string, dups *[]FieldError) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return tok, nil // string, json.Number, bool or nil
	}
	switch d {
	case '{':
		m := map[string]any{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return nil, err
			}
			k, _ := kt.(string)
			x, err := readValue(dec, append(loc, k), dups)
			if err != nil {
				return nil, err
			}
			if _, dup := m[k]; dup {
				*dups = append(*dups, FieldError{Pointer: pointer(child(loc, k)), Message: "appears more than once in its object"})
			}
			m[k] = x
		}
		_, err = dec.Token() // '}'
		return m, err
	case '[':
		a := []any{}
		for dec.More() {
			x, err := readValue(dec, append(loc, strconv.Itoa(len(a))), dups)
			if err != nil {
				return nil, err
			}
			a = append(a, x)
		}
		_, err = dec.Token() // ']'
		return a, err
	}
	return nil, fmt.Errorf("unexpected %v", d)
}

// invalidUTF8 returns the offset of the first byte of b that is not valid
// UTF-8.
func invalidUTF8(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(b)
}

// checkNumbers appends a FieldError for every number in v that is longer
// than MaxNumberLength or whose exponent exceeds MaxNumberExponent, and
// returns v with each of them replaced by 0.
func checkNumbers(v any, loc []string, out *[]FieldError) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = checkNumbers(e, append(loc, k), out)
		}
	case []any:
		for i, e := range x {
			x[i] = checkNumbers(e, append(loc, strconv.Itoa(i)), out)
		}
	case json.Number:
		if msg := numberProblem(string(x)); msg != "" {
			*out = append(*out, FieldError{Pointer: pointer(loc), Message: msg})
			return json.Number("0")
		}
	}
	return v
}

// numberProblem says what is wrong with the JSON number s, or "".
func numberProblem(s string) string {
	if len(s) > MaxNumberLength {
		return fmt.Sprintf("is a number of %d characters; at most %d are allowed", len(s), MaxNumberLength)
	}
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		e, err := strconv.Atoi(strings.TrimPrefix(s[i+1:], "+"))
		if err != nil || e > MaxNumberExponent || e < -MaxNumberExponent {
			return fmt.Sprintf("is a number whose exponent is out of range: at most %d either way is allowed", MaxNumberExponent)
		}
	}
	return ""
}

// invalidFields returns the CodeInvalid *Error listing fields, sorted by
// pointer and capped at MaxFieldErrors.
func invalidFields(what string, fields []FieldError) *Error {
	sortFields(fields)
	fields = dedupe(fields)
	total := len(fields)
	if total > MaxFieldErrors {
		fields = fields[:MaxFieldErrors]
	}
	var b strings.Builder
	b.WriteString(what)
	b.WriteString(" is invalid: ")
	const shown = 3
	for i, f := range fields {
		if i == shown {
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		if f.Pointer == "" {
			b.WriteString("the message")
		} else {
			b.WriteString(f.Pointer)
		}
		b.WriteString(": ")
		b.WriteString(f.Message)
	}
	if total > shown {
		fmt.Fprintf(&b, "; and %d more (see fields)", total-shown)
	}
	if total > len(fields) {
		fmt.Fprintf(&b, "; only the first %d are listed", len(fields))
	}
	return &Error{Code: CodeInvalid, Message: b.String(), Fields: fields}
}

// validatorStack is the frame growStack takes: with it, a goroutine that
// starts with the smallest stack (8 KiB) grows to 32 KiB at once, which holds
// the validator's recursion for commands up to plan.submit (with 8 KiB, a
// 16 KiB stack, plan.submit's still grew once more: runtime.newstack 7% of
// its fresh-goroutine benchmark against 1.5-3.5%).
const validatorStack = 16 << 10

// growStack grows the calling goroutine's stack, while it is still shallow,
// to hold the validator's recursion. The service validates every request
// on a fresh goroutine, which starts with a small stack: without this, the
// stack grows in steps as the recursion deepens, each step copying the whole
// deep stack (and adjusting every frame), which cost about a third of a
// small command's validation (BenchmarkValidateCommandInFreshGoroutine with
// GODEBUG=adaptivestackstart=0: runtime.newstack 18% of the samples without,
// 2% with). Grown here, the stack is copied while it holds a few frames.
//
//go:noinline
func growStack(i int) byte {
	var pad [validatorStack]byte // indexed by a variable, it stays in the frame
	return pad[i]
}
