package schemas

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
)

// Sealed values. With encryption on (the default of dwr serve), the
// service seals the payloads that carry user data — task inputs, results,
// checkpoints, signal payloads, verdict evidence — before they reach the
// log, the event feed, the work queue or the views: each becomes a JSON
// string
//
//	"dwr:sealed:1:<scope>:<base64url of nonce, ciphertext and tag>"
//
// encrypted with the data key of its scope: "w" for the workspace's key,
// "g.<goal id>" for a goal's own key (a goal whose envelope says privacy
// key goal). Queries, and the task a claim returns, carry the payloads
// opened for the caller; events and work items carry them sealed (read
// the task with task.get, or claim first). Once its key is shredded, a
// sealed value reads as Shredded.
const (
	SealedPrefix = "dwr:sealed:1:"
	// Shredded is what a sealed value reads as once its key was shredded:
	// the JSON string "[shredded]".
	Shredded = "[shredded]"
	// SealOverhead is what sealing adds to a payload before its base64:
	// the nonce (24 bytes) and the authentication tag (16).
	SealOverhead = 24 + 16
)

var sealedOpen = []byte(`"` + SealedPrefix)

// IsSealed reports whether raw is a sealed value.
func IsSealed(raw []byte) bool {
	return len(raw) > len(sealedOpen) && bytes.HasPrefix(raw, sealedOpen) && raw[len(raw)-1] == '"'
}

// TextSize returns the size of the text s as its sender wrote it: its
// length, or for a sealed text (a string field the service seals, such as
// an error's message: the sealed value without its quotes) about the length
// of the text it seals.
func TextSize(s string) int {
	if len(s) <= len(SealedPrefix) || s[:len(SealedPrefix)] != SealedPrefix {
		return len(s)
	}
	return max(PayloadSize([]byte(`"`+s+`"`))-2, 0)
}

// PayloadSize returns the size of the payload raw as its sender wrote it:
// its length, or for a sealed value the length of the plaintext it seals.
// The bounds on payloads (256 KiB) are on that size.
func PayloadSize(raw []byte) int {
	if !IsSealed(raw) {
		return len(raw)
	}
	body := raw[len(sealedOpen) : len(raw)-1]
	i := bytes.LastIndexByte(body, ':')
	if i < 0 {
		return len(raw)
	}
	return max(base64.RawURLEncoding.DecodedLen(len(body)-i-1)-SealOverhead, 0)
}

// CheckNotSealed refuses (invalid, naming each field) a message whose
// strings — values or object keys — begin with SealedPrefix: only the
// service writes sealed values, and anything of that form in what it
// stores is taken for one and opened when it is read. A client's forged
// "sealed" input would otherwise make every reply that carries it fail
// (a task list of the whole workspace among them). what names the message.
func CheckNotSealed(what string, b []byte) error {
	if !bytes.Contains(b, sealedOpen) {
		return nil // the common case: no string can begin with the prefix
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return nil // not JSON: the validation that follows says why
	}
	var fields []FieldError
	var walk func(v any, loc []string)
	bad := func(loc []string) {
		fields = append(fields, FieldError{Pointer: pointer(loc),
			Message: "begins with " + SealedPrefix + ", which marks a payload the service sealed: send it as it is"})
	}
	walk = func(v any, loc []string) {
		switch x := v.(type) {
		case string:
			if strings.HasPrefix(x, SealedPrefix) {
				bad(loc)
			}
		case map[string]any:
			for k, e := range x {
				if strings.HasPrefix(k, SealedPrefix) {
					bad(append(slices.Clone(loc), k))
					continue
				}
				walk(e, append(slices.Clone(loc), k))
			}
		case []any:
			for i, e := range x {
				walk(e, append(slices.Clone(loc), strconv.Itoa(i)))
			}
		}
	}
	walk(v, nil)
	if len(fields) == 0 {
		return nil
	}
	return invalidFields(what, fields)
}
