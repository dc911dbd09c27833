package schemas_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/schemas"
)

// requireCode fails unless err is an *Error with code.
func requireCode(t *testing.T, err error, code string) {
	t.Helper()
	_ = requireError(t, err, code)
}

// requireError fails unless err is an *Error with code, and returns it.
func requireError(t *testing.T, err error, code string) *schemas.Error {
	t.Helper()
	var e *schemas.Error
	require.True(t, errors.As(err, &e), "want a *schemas.Error, got %T: %v", err, err)
	require.Equal(t, code, e.Code, e.Message)
	require.True(t, strings.HasPrefix(e.Error(), "schemas: "), e.Error())
	return e
}

func nested(open, close string, depth int) []byte {
	return []byte(strings.Repeat(open, depth) + strings.Repeat(close, depth))
}

func TestCheckBoundsSize(t *testing.T) {
	b := bytes.Repeat([]byte(" "), 101)
	require.NoError(t, schemas.CheckBounds(b[:100], 100, 4))
	e := requireError(t, schemas.CheckBounds(b, 100, 4), schemas.CodeTooLarge)
	require.Contains(t, e.Message, "101 bytes")
	require.Contains(t, e.Message, "at most 100")
	require.ErrorIs(t, e, schemas.ErrTooLarge)

	// Non-positive limits mean the defaults.
	big := bytes.Repeat([]byte(" "), schemas.MaxMessageBytes+1)
	requireCode(t, schemas.CheckBounds(big, 0, 0), schemas.CodeTooLarge)
	require.NoError(t, schemas.CheckBounds(big[:schemas.MaxMessageBytes], -1, -1))
}

func TestCheckBoundsDepth(t *testing.T) {
	for name, pair := range map[string][2]string{"arrays": {"[", "]"}, "objects": {`{"a":`, "}"}} {
		t.Run(name, func(t *testing.T) {
			require.NoError(t, schemas.CheckBounds(nested(pair[0], pair[1], schemas.MaxDepth), 0, 0))
			e := requireError(t, schemas.CheckBounds(nested(pair[0], pair[1], schemas.MaxDepth+1), 0, 0), schemas.CodeInvalid)
			require.Contains(t, e.Message, "33 deep")
			require.Contains(t, e.Message, "at most 32")
			require.ErrorIs(t, e, schemas.ErrInvalid)
		})
	}
	// Mixed nesting, and depth that comes back down before going deep again.
	require.NoError(t, schemas.CheckBounds([]byte(`{"a":[{"b":[1,2]},{"c":[[3]]}]}`), 0, 5))
	requireCode(t, schemas.CheckBounds([]byte(`{"a":[{"b":[1,2]},{"c":[[[3]]]}]}`), 0, 5), schemas.CodeInvalid)
	require.NoError(t, schemas.CheckBounds([]byte(`[[[1]],[[2]],[[3]]]`), 0, 3))
}

func TestCheckBoundsIgnoresStrings(t *testing.T) {
	deep := strings.Repeat("[{", 100)
	cases := map[string]string{
		"brackets in a string":             `{"a":"` + deep + `"}`,
		"escaped quote":                    `{"a":"\"` + deep + `"}`,
		"escaped quotes and backslashes":   `{"a":"\\\"\\\\\"` + deep + `"}`,
		"unicode escape":                   `{"a":"\u0022` + deep + `"}`,
		"brackets in a key":                `{"` + deep + `":1}`,
		"closing brackets in a string":     `[[["]]]]]]]]"]]]`,
		"unterminated string is not depth": `["` + deep,
	}
	for name, s := range cases {
		t.Run(name, func(t *testing.T) {
			require.NoError(t, schemas.CheckBounds([]byte(s), 0, 3))
		})
	}
	// A backslash that escapes a backslash does not escape the quote after
	// it: the string ends there and the brackets after it count.
	requireCode(t, schemas.CheckBounds([]byte(`["\\"`+strings.Repeat("[", 5)), 0, 3), schemas.CodeInvalid)
	// Closing brackets in strings do not lower the depth.
	requireCode(t, schemas.CheckBounds([]byte(`[["]]]]"[[`), 0, 3), schemas.CodeInvalid)
}

func TestCheckBoundsAllocatesNothing(t *testing.T) {
	b := []byte(`{"a":[{"b":"c\"[[["},{"d":[1,2,3]}]}`)
	allocs := testing.AllocsPerRun(100, func() {
		if err := schemas.CheckBounds(b, 0, 0); err != nil {
			t.Fatal(err)
		}
	})
	require.Zero(t, allocs)
}

// benchMessage returns a realistic command of about size bytes: a plan whose
// tasks carry text inputs with escapes.
func benchMessage(size int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"goal_id":"01JWQYPRT84TFF59TDWH9EDD1R","tasks":[`)
	for i := 0; b.Len() < size-200; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"key":"t`)
		b.WriteString(strings.Repeat("x", i%7))
		b.WriteString(`","queue":"writer","input":{"text":"a \"quoted\" [bracket] {brace} \\ line\n`)
		b.WriteString(strings.Repeat("lorem ipsum ", 20))
		b.WriteString(`","n":[1,2,3],"o":{"p":{"q":true}}},"retry":{"max_attempts":3}}`)
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

func BenchmarkCheckBounds(b *testing.B) {
	msg := benchMessage(512 << 10)
	if err := schemas.CheckBounds(msg, 0, 0); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		if err := schemas.CheckBounds(msg, 0, 0); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkValidateCommand(b *testing.B) {
	msg := benchMessage(256 << 10)
	if err := schemas.ValidateCommand("plan.submit", msg); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		if err := schemas.ValidateCommand("plan.submit", msg); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkValidateSmallCommand(b *testing.B) {
	msg := []byte(`{"task_id":"01JWTD0Q80H4QX4FR84G98PBSK","attempt":2,"token":"KhiymZYPFrFU6oy_5dRGFXrvyIw7zxqAVT7FeMpRSQU","result":{"title":"Q2 market report","words":3812},"artifacts":[{"name":"r.pdf","sha256":"d28f98711b39b05aa891ae0c1df6d5c0cc7b1056967688259928fe88cc5639f4","size":482133}]}`)
	if err := schemas.ValidateCommand("task.succeed", msg); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := schemas.ValidateCommand("task.succeed", msg); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkValidateCommandInFreshGoroutine validates a small command on a
// new goroutine each time, as the service does for every request: what a
// goroutine's stack growing through the validator's recursion costs shows.
func BenchmarkValidateCommandInFreshGoroutine(b *testing.B) {
	msg := []byte(`{"task_id":"01JWTD0Q80H4QX4FR84G98PBSK","attempt":2,"token":"KhiymZYPFrFU6oy_5dRGFXrvyIw7zxqAVT7FeMpRSQU","result":{"title":"Q2 market report","words":3812},"artifacts":[{"name":"r.pdf","sha256":"d28f98711b39b05aa891ae0c1df6d5c0cc7b1056967688259928fe88cc5639f4","size":482133}]}`)
	if err := schemas.ValidateCommand("task.succeed", msg); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	errs := make(chan error)
	for b.Loop() {
		go func() { errs <- schemas.ValidateCommand("task.succeed", msg) }()
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
}
