package eventstore

// DecodeHeaderForTest returns what CheckChain reads of a record: its
// format, position and previous hash.
func DecodeHeaderForTest(rec []byte) [3]any {
	h, _ := decodeHeader(rec)
	return [3]any{h.F, h.N, h.Prev}
}
