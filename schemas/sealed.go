package schemas

import (
	"bytes"
	"encoding/base64"
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
