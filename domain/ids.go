package domain

import (
	"crypto/sha256"
	"regexp"
	"time"

	"github.com/oklog/ulid/v2"
)

// DeriveID returns a ULID whose time part is now and whose entropy is derived
// from seed, so the same (now, seed) always gives the same id. The writer uses
// it for ids it creates while deciding (a plan's tasks), which keeps deciding
// deterministic.
func DeriveID(now time.Time, seed string) string {
	sum := sha256.Sum256([]byte(seed))
	var id ulid.ULID
	if err := id.SetTime(ulid.Timestamp(now)); err != nil {
		// Times before 1970 or after 10889 cannot be encoded; clamp to zero.
		_ = id.SetTime(0)
	}
	_ = id.SetEntropy(sum[:10])
	return id.String()
}

// DeriveSeqID is DeriveID with the position n (0-65535) in the first two
// bytes of the entropy, so ids derived at the same moment sort by n: a plan's
// tasks list in plan order.
func DeriveSeqID(now time.Time, n int, seed string) string {
	sum := sha256.Sum256([]byte(seed))
	sum[0], sum[1] = byte(n>>8), byte(n) //nolint:gosec // the low 16 bits are the point: n is a position, truncation is documented
	var id ulid.ULID
	if err := id.SetTime(ulid.Timestamp(now)); err != nil {
		_ = id.SetTime(0)
	}
	_ = id.SetEntropy(sum[:10])
	return id.String()
}

var (
	keyRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)
)

// ValidName reports whether s can be a workspace name or a queue name: it is
// used as one token of a NATS subject, so lower-case letters, digits, '_'
// and '-', 1 to 63 characters, starting with a letter or digit.
func ValidName(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case (c == '_' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}

// ValidKey reports whether s can be a task's key within a plan.
func ValidKey(s string) bool { return keyRe.MatchString(s) }

// ValidID reports whether s is a canonical ULID string.
func ValidID(s string) bool {
	if len(s) != ulid.EncodedSize {
		return false
	}
	id, err := ulid.ParseStrict(s)
	return err == nil && id.String() == s
}
