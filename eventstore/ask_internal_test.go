package eventstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// A request that goes unanswered is asked again after its try, and the
// answer to a later try is returned; any other error is returned at once,
// and when ctx ends the asking stops.
func TestAskAgainAsksAnUnansweredRequestAgain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tries := 0
	v, err := askAgain(ctx, 20*time.Millisecond, func(ctx context.Context) (int, error) {
		tries++
		if tries < 3 {
			<-ctx.Done() // lost: never answered
			return 0, ctx.Err()
		}
		return 42, nil
	})
	require.NoError(t, err)
	require.Equal(t, 42, v)
	require.Equal(t, 3, tries)

	refused := errors.New("stream not found")
	tries = 0
	_, err = askAgain(ctx, 20*time.Millisecond, func(context.Context) (int, error) { tries++; return 0, refused })
	require.ErrorIs(t, err, refused)
	require.Equal(t, 1, tries, "an answer, even a refusal, is not asked again")

	short, stop := context.WithTimeout(ctx, 100*time.Millisecond)
	defer stop()
	_, err = askAgain(short, 20*time.Millisecond, func(ctx context.Context) (int, error) { <-ctx.Done(); return 0, ctx.Err() })
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Error(t, short.Err(), "it gave up only when its own ctx ended")
}

// A request that finds no responders (a node whose JetStream is still
// starting) is asked again within its try, and the answer returned; one
// that finds none for the whole try returns that error, not a timeout.
func TestAskAgainAsksAgainWhileNoOneResponds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tries := 0
	v, err := askAgain(ctx, time.Second, func(context.Context) (int, error) {
		tries++
		if tries < 4 {
			return 0, nats.ErrNoResponders
		}
		return 7, nil
	})
	require.NoError(t, err)
	require.Equal(t, 7, v)
	require.Equal(t, 4, tries)

	tries = 0
	_, err = askAgain(ctx, 200*time.Millisecond, func(context.Context) (int, error) { tries++; return 0, nats.ErrNoResponders })
	require.ErrorIs(t, err, nats.ErrNoResponders)
	require.Greater(t, tries, 1)
	require.NoError(t, ctx.Err(), "it gave up after one try, not when its ctx ended")
}
