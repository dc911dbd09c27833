package domain

import "testing"

func TestValidName(t *testing.T) {
	for s, want := range map[string]bool{
		"default": true, "a": true, "q-1_x": true, "0abc": true,
		"": false, "-a": false, "_a": false, "A": false, "a.b": false, "a b": false, "a*": false, "a>": false,
		"abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijk":  true,  // 63
		"abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijkl": false, // 64
	} {
		if got := ValidName(s); got != want {
			t.Errorf("ValidName(%q) = %v, want %v", s, got, want)
		}
	}
}
