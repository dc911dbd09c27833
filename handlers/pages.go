package handlers

import (
	"encoding/json"
	"fmt"

	"github.com/dwr-run/dwr/schemas"
)

// Paging of the list queries (task.list, goal.list, approval.list,
// member.list, events): a reply holds at most a limit of items and never
// more bytes than a reply can carry; when more follow, its next is the
// cursor that a query with after continues from.
const (
	// DefaultLimit is how many items a list query answers when it names no
	// limit.
	DefaultLimit = 100
	// MaxLimit is the largest limit a list query may name.
	MaxLimit = 10_000
	// replyRoom is kept under the largest reply for the reply's envelope
	// (ok, seq, next) and headers.
	replyRoom = 4 << 10
	// minReplyBytes is the smallest Config.MaxReplyBytes accepted.
	minReplyBytes = 2 * replyRoom
)

// replyBudget returns the most bytes a reply's result may take: the largest
// message the NATS connection carries (Config.MaxReplyBytes when smaller),
// less room for the envelope and headers.
func (s *Service) replyBudget() int {
	n := int(s.nc.MaxPayload())
	if n <= 0 {
		n = schemas.MaxMessageBytes
	}
	if m := s.cfg.MaxReplyBytes; m > 0 && m < n {
		n = m
	}
	return n - replyRoom
}

// page is the result of a list query in the making: items encoded one by
// one while they number fewer than its limit and fit in its budget.
type page struct {
	limit, budget int
	// what names an item in messages ("task"); read says how to read one
	// too large to list.
	what, read string

	buf  []byte // "[" and the items taken, comma-separated
	n    int
	last string // the cursor after the last item taken
	next string // set once an item was left for the next page
	err  error
	// passed counts the items a filtered page read but did not hold
	// (passOver).
	passed int64
}

func newPage(what, read string, limit, budget int) *page {
	return &page{limit: limit, budget: budget, what: what, read: read, buf: []byte{'['}}
}

// add takes item v, whose id names it in messages and whose cursor
// continues the listing after it. It returns false when the page is full:
// v is then left for the next page, whose cursor is next.
func (p *page) add(v any, id, cursor string) bool {
	if p.n == p.limit {
		p.next = p.last
		return false
	}
	b, err := json.Marshal(v)
	if err != nil {
		p.err = err
		return false
	}
	return p.addRaw(b, id, cursor)
}

// addRaw is add for an item already encoded.
func (p *page) addRaw(b []byte, id, cursor string) bool {
	if p.n == p.limit {
		p.next = p.last
		return false
	}
	if len(p.buf)+len(b)+2 > p.budget { // a comma, and the closing bracket
		if p.n > 0 {
			p.next = p.last
			return false
		}
		after := ""
		if cursor != "" {
			after = fmt.Sprintf("; list past it with after %q", cursor)
		}
		p.err = &schemas.Error{Code: schemas.CodeTooLarge, Message: fmt.Sprintf(
			"%s %s alone is %d bytes, more than a reply can carry (%d): %s%s", p.what, id, len(b), p.budget, p.read, after)}
		return false
	}
	if p.n > 0 {
		p.buf = append(p.buf, ',')
	}
	p.buf = append(p.buf, b...)
	p.n++
	p.last = cursor
	return true
}

// result returns the page's items as a JSON array and the cursor of the
// next page ("" when nothing follows), or the first error: err, given by the
// listing, or the page's own.
func (p *page) result(err error) (json.RawMessage, string, error) {
	if err == nil {
		err = p.err
	}
	if err != nil {
		return nil, "", err
	}
	return append(p.buf, ']'), p.next, nil
}

// one encodes a query's single result, or refuses it as too large with the
// advice tooLarge gives for its size.
func one(v any, err error, budget int, tooLarge func(size int) string) (json.RawMessage, string, error) {
	if err != nil {
		return nil, "", err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, "", err
	}
	if len(b) > budget {
		return nil, "", &schemas.Error{Code: schemas.CodeTooLarge, Message: tooLarge(len(b))}
	}
	return b, "", nil
}

// tooLargeReply is the advice for a result too large that no other query
// reads in pieces.
func tooLargeReply(budget int) func(int) string {
	return func(size int) string {
		return fmt.Sprintf("the reply would be %d bytes, more than a reply can carry (%d, under the NATS server's max_payload): "+
			"raise max_payload, or ask for less", size, budget)
	}
}
