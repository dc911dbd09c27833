package bench

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The help of `dwr bench` describes every mode Run measures, and that of
// `dwr bench chain3` how RunChain runs the service.
func TestMethodDescribesTheModes(t *testing.T) {
	for _, m := range []string{ModeBaseline, ModeGroup, ModeFsync} {
		require.Contains(t, Method, "\n  "+m+" ", "mode %s", m)
	}
	for _, s := range []string{"--chains", "--single", "--deployed", "--warmup", "--compare-auth"} {
		require.Contains(t, ChainMethod, s)
	}
}
