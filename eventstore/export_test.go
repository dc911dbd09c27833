package eventstore

import "context"

// DecodeHeaderForTest returns what CheckChain reads of a record: its
// format, position and previous hash.
func DecodeHeaderForTest(rec []byte) [3]any {
	h, _ := decodeHeader(rec)
	return [3]any{h.F, h.N, h.Prev}
}

// ReadFromLeaderForTest is the end of a read whose replica lags: records
// from from to until, each asked of the stream's leader.
func (l *JetStreamLog) ReadFromLeaderForTest(ctx context.Context, from, until uint64, fn func(seq uint64, rec []byte) error) error {
	return l.readFromLeader(ctx, from, until, fn)
}
