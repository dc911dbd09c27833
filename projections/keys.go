package projections

import (
	"encoding/base64"
	"encoding/binary"
)

// Key layout: a short prefix, then parts joined by '/'; ids and names never
// contain '/'.
const (
	pCheckpoint     = "k/checkpoint"
	pLogTip         = "k/logtip"       // the checkpoint's record as verified: eventstore.LogTip
	pTimersByWSKept = "k/timers-by-ws" // present once the views keep pTimerByWS
	pDiscarded      = "k/discarded"    // k/discarded/<first seq BE> -> last seq BE: a stretch an acceptance left out
	pLogBytesFrom   = "k/log-bytes"    // -> the first record the lb/ rows count, BE
	pLogBytes       = "lb"             // lb/<ws> -> the bytes of the log the workspace holds, BE
	pWorkspace      = "w"              // w/<ws>
	pGoal           = "g"              // g/<goal>
	pGoalByWS       = "gw"             // gw/<ws>/<goal>
	pGoalCounts     = "gc"             // gc/<goal> -> map state->count
	pGoalLabel      = "gl"             // gl/<ws>/<label name>/<value, base64url>/<goal>
	pGoalKey        = "gk"             // gk/<ws>/<goal key> -> the id of the goal made last with it
	pTaskLabel      = "tl"             // tl/<ws>/<label name>/<value, base64url>/<task>
	pTask           = "t"              // t/<task>
	pTaskByWS       = "tw"             // tw/<ws>/<state>/<task>
	pTaskByGoal     = "tg"             // tg/<goal>/<task>
	pDependents     = "td"             // td/<dependency>/<task>
	pHistory        = "h"              // h/<aggtype>/<id>/<version BE>
	pTip            = "a"              // a/<aggtype>/<id>: the cache's key of a chain tip (views written before kept it as a row)
	pCommand        = "c"              // c/<ws>/<command key: domain.CommandKey of actor and id> -> first outcome
	pTimer          = "tm"             // tm/<due unix nanos BE>/<task, goal or schedule id>/<kind>/<attempt> -> workspace
	pTimerByWS      = "tmw"            // tmw/<ws>/<due unix nanos BE>/<task, goal or schedule id>/<kind>/<attempt>
	pApproval       = "ap"             // ap/<ws>/<approval state>/<approval id>
	pRitual         = "r"              // r/<ritual id: <ws>:<name>>
	pRitualVer      = "rv"             // rv/<ritual id>/<version BE> -> domain.RitualVersion
	pSchedule       = "sc"             // sc/<schedule id: <ws>:<name>>
)

func key(parts ...string) []byte {
	n := 0
	for _, p := range parts {
		n += len(p) + 1
	}
	b := make([]byte, 0, n)
	for i, p := range parts {
		if i > 0 {
			b = append(b, '/')
		}
		b = append(b, p...)
	}
	return b
}

// labelPrefix is the prefix of the keys under pre (pGoalLabel,
// pTaskLabel) of the goals or tasks of workspace ws that hold label name
// with value: the value in base64url, which holds no '/', so that one
// value's keys never share the prefix of another's.
func labelPrefix(pre, ws, name, value string) []byte {
	return key(pre, ws, name, base64.RawURLEncoding.EncodeToString([]byte(value)), "")
}

func historyKey(aggType, id string, version uint64) []byte {
	b := key(pHistory, aggType, id, "")
	return binary.BigEndian.AppendUint64(b, version)
}

// upperBound returns the smallest key greater than every key with prefix p.
func upperBound(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		end[i]++
		if end[i] != 0 {
			return end[:i+1]
		}
	}
	return nil
}

func ritualVersionKey(id string, version uint64) []byte {
	b := key(pRitualVer, id, "")
	return binary.BigEndian.AppendUint64(b, version)
}
