package eventstore_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/eventstore"
)

func taskEvent(id string) eventstore.Event {
	return eventstore.Event{ID: "e-" + id, Type: "task.touched", AggregateType: "task", AggregateID: id,
		Time: time.Unix(0, 0), Data: json.RawMessage(`{}`)}
}

// linked writes n events of aggregate id through a chain transaction.
func linked(t *testing.T, v *eventstore.ChainVerifier, id string, n int) []eventstore.Event {
	t.Helper()
	tx := v.Begin()
	evs := make([]eventstore.Event, n)
	for i := range evs {
		evs[i] = taskEvent(id)
		require.NoError(t, tx.Link(&evs[i]))
	}
	tx.Commit()
	return evs
}

func TestChainLinkAndCheck(t *testing.T) {
	writer := eventstore.NewChainVerifier()
	evs := linked(t, writer, "t1", 3)
	require.Equal(t, uint64(1), evs[0].Version)
	require.Empty(t, evs[0].PrevHash)
	require.Equal(t, evs[0].Hash(), evs[1].PrevHash)
	require.Equal(t, uint64(3), evs[2].Version)
	ver, hash := writer.Tip("task", "t1")
	require.Equal(t, uint64(3), ver)
	require.Equal(t, evs[2].Hash(), hash)

	reader := eventstore.NewChainVerifier()
	for i := range evs {
		require.NoError(t, reader.Check(&evs[i]))
	}
	require.Equal(t, 1, reader.Len())
}

func TestChainTxIsSpeculative(t *testing.T) {
	v := eventstore.NewChainVerifier()
	tx := v.Begin()
	e := taskEvent("t1")
	require.NoError(t, tx.Link(&e))
	ver, _ := v.Tip("task", "t1")
	require.Zero(t, ver, "nothing changes before Commit")

	e2 := taskEvent("t1")
	e2.Version = 3
	var ce *eventstore.ChainError
	require.ErrorAs(t, tx.Link(&e2), &ce, "a version chosen by the decider must extend the chain")
	require.Equal(t, eventstore.ChainGap, ce.Problem)
}

func TestChainErrors(t *testing.T) {
	evs := linked(t, eventstore.NewChainVerifier(), "t1", 3)
	for name, tc := range map[string]struct {
		seed    int // events already checked
		event   func() eventstore.Event
		problem eventstore.ChainProblem
	}{
		"gap":       {1, func() eventstore.Event { return evs[2] }, eventstore.ChainGap},
		"duplicate": {2, func() eventstore.Event { return evs[1] }, eventstore.ChainDuplicate},
		"prev hash": {1, func() eventstore.Event {
			e := evs[1]
			e.PrevHash = "bad"
			return e
		}, eventstore.ChainPrevMismatch},
		"first without prev": {0, func() eventstore.Event {
			e := evs[0]
			e.PrevHash = "x"
			return e
		}, eventstore.ChainPrevMismatch},
	} {
		t.Run(name, func(t *testing.T) {
			v := eventstore.NewChainVerifier()
			for i := range tc.seed {
				require.NoError(t, v.Check(&evs[i]))
			}
			e := tc.event()
			var ce *eventstore.ChainError
			require.ErrorAs(t, v.Check(&e), &ce)
			require.Equal(t, tc.problem, ce.Problem)
			require.Equal(t, "task", ce.AggregateType)
			require.Equal(t, "t1", ce.AggregateID)
			require.Equal(t, e.Version, ce.Version)
			require.Contains(t, ce.Error(), "eventstore: task/t1")
			ver, _ := v.Tip("task", "t1")
			require.Equal(t, uint64(tc.seed), ver, "a failed check leaves the tip")
		})
	}
}

func TestChainSeed(t *testing.T) {
	evs := linked(t, eventstore.NewChainVerifier(), "t1", 3)
	v := eventstore.NewChainVerifier()
	v.Seed("task", "t1", 2, evs[1].Hash())
	require.NoError(t, v.Check(&evs[2]), "resume from a checkpoint")
	v.Seed("task", "t1", 0, "")
	require.Zero(t, v.Len())

	noRaw := evs[0]
	noRaw.Raw = nil
	require.ErrorContains(t, v.Check(&noRaw), "no stored bytes")
}

// mapTips is a TipSource over a map, standing in for the views.
type mapTips map[string][2]string

func (m mapTips) Tip(typ, id string) (uint64, string, error) {
	t, ok := m[typ+"/"+id]
	if !ok {
		return 0, "", nil
	}
	var v uint64
	_, err := fmt.Sscan(t[0], &v)
	return v, t[1], err
}

func TestChainVerifierOverASourceForgetsAndAsks(t *testing.T) {
	src := mapTips{}
	v := eventstore.NewChainVerifierOver(src, 1)
	link := func(id string) *eventstore.Event {
		tx := v.Begin()
		e := &eventstore.Event{ID: "01ARZ3NDEKTSV4RRFFQ69G5FAV", Type: "t.x", AggregateType: "t", AggregateID: id,
			Workspace: "w", CommandID: "c", Time: time.Unix(0, 0).UTC(), Data: json.RawMessage(`{}`)}
		require.NoError(t, tx.Link(e))
		tx.Commit()
		src["t/"+id] = [2]string{fmt.Sprint(e.Version), e.Hash()} // the views apply the record
		return e
	}
	a1 := link("a")
	link("b") // now two tips are held: the next Begin forgets them
	a2 := link("a")
	require.Equal(t, uint64(2), a2.Version, "the tip came from the source")
	require.Equal(t, a1.Hash(), a2.PrevHash)
	require.LessOrEqual(t, v.Len(), 2)

	// Reading resumes from the source's tips: the next event verifies, a
	// repeat of an applied one does not.
	src["t/a"] = [2]string{"1", a1.Hash()}
	v2 := eventstore.NewChainVerifierOver(src, 10)
	var ce *eventstore.ChainError
	require.ErrorAs(t, v2.Check(a1), &ce)
	require.Equal(t, eventstore.ChainDuplicate, ce.Problem)
	require.NoError(t, v2.Check(a2))
}
