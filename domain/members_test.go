package domain

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Public keys of NATS users made by nkeys.CreateUser (nkeys v0.4.16), the
// library the NATS server reads them with; the last from the all-zero seed.
var nkeysUsers = []string{
	"UA7MKXBLY6WJ5644NDJL7IFP4GV56SLO2464EHTM3LXWGVVLUA5ASOHH",
	"UAFX6JXN64DJ77OVSWCEW4QPAYNB6MQXY747VU67A2D5SZONOHUY4TJK",
	"UDYAX3UDQZWCSL2WQ66QSQOI2XO3ZEN3VHDFI6FUE7JT3D73CCFW7NNJ",
	"UA67VXE3HHM5V4BIPGDZV55YG3BWJN3CPFTS3IVSJRI6XEIDJ5JW3PFP",
	"UA5WUJ54Z23KILLCUOUNAKTPBVZWKMQVO4O6EQ5GHLAERIMLLHNCTYM5",
}

// encodeKey encodes a 32-byte key under prefix as nkeys does: base32 without
// padding of the prefix, the key and their CRC-16, little-endian.
func encodeKey(prefix byte, key []byte) string {
	raw := append([]byte{prefix}, key...)
	crc := crc16(raw)
	raw = append(raw, byte(crc), byte(crc>>8))
	return base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(raw)
}

// userKey returns a fixed NATS user key for name.
func userKey(name string) string {
	k := sha256.Sum256([]byte("user key " + name))
	return encodeKey(userKeyPrefix, k[:])
}

// workspace returns the world's workspace as it is now.
func (w *world) workspace() *Workspace {
	w.t.Helper()
	ws, err := w.o.Workspace(w.ws)
	require.NoError(w.t, err)
	require.NotNil(w.t, ws, "workspace %s", w.ws)
	return ws
}

func TestValidUserKey(t *testing.T) {
	for _, k := range nkeysUsers {
		require.True(t, ValidUserKey(k), k)
	}
	for i := range 50 {
		k := userKey(fmt.Sprint(i))
		require.True(t, ValidUserKey(k), k)
		require.Regexp(t, `^U[A-D][A-Z2-7]{54}$`, k, "the shape the schema asks for")
	}
	good := nkeysUsers[0]
	flip := func(i int, c byte) string { b := []byte(good); b[i] = c; return string(b) }
	zero := make([]byte, 32)
	for name, bad := range map[string]string{
		"empty":                                  "",
		"short":                                  good[:55],
		"long":                                   good + "A",
		"padded":                                 good[:55] + "=",
		"lower case":                             strings.ToLower(good),
		"a digit 0":                              flip(10, '0'),
		"a digit 8":                              flip(10, '8'),
		"mistyped":                               flip(10, good[10]^1),
		"last char altered":                      flip(55, 'A'+(good[55]-'A'+1)%26),
		"account key":                            "AAQCYTDUKOYKWFGF7AYYNFRJNCQ2GG3MIDWQWSIDIOUPRQRXPZZZQ4YM",
		"account seed":                           "SAAN3RUMS42DMNC6NNCE4OBRKZJ7VN7SAG4WW5AK7KWDG72HXPTLP5VLHY",
		"operator key":                           encodeKey(14<<3, zero),
		"prefix with stray bits, valid checksum": encodeKey(userKeyPrefix|5, zero),
		"an Ed25519 key in base64":               pubOf(keyOf("alice")),
	} {
		require.False(t, ValidUserKey(bad), "%s: %q", name, bad)
	}
}

func TestCRC16IsXMODEM(t *testing.T) {
	require.Equal(t, uint16(0x31C3), crc16([]byte("123456789")), "the CRC-16/XMODEM check value")
	require.Zero(t, crc16(nil))
}

func TestAddMember(t *testing.T) {
	w := setup(t)
	out := w.must(&AddMember{Name: "ops", Role: RoleAdmin, PublicKey: userKey("ops")})
	require.Equal(t, []string{"workspace.member_added"}, events(out, w.ws))
	require.Equal(t, w.ws, out.Reply.ID)
	require.Equal(t, uint64(2), out.Reply.Version)
	w.advance(time.Minute)
	w.must(&AddMember{Name: "runner", Role: RoleExecutor, PublicKey: userKey("runner"), Queues: []string{"build", "test"}})
	for _, r := range []Role{RoleClient, RoleApprover, RoleViewer} {
		w.must(&AddMember{Name: "m-" + string(r), Role: r, PublicKey: userKey(string(r))})
	}

	ws := w.workspace()
	require.Len(t, ws.Members, 5)
	m := ws.Member("runner")
	require.NotNil(t, m)
	require.Equal(t, Member{Name: "runner", Role: RoleExecutor, PublicKey: userKey("runner"), Queues: []string{"build", "test"},
		AddedAt: epoch.Add(time.Minute)}, *m)
	require.Same(t, m, ws.MemberByKey(userKey("runner")))
	require.True(t, m.MayWork("build"))
	require.False(t, m.MayWork("deploy"))
	require.Equal(t, epoch, ws.Member("ops").AddedAt)
	require.Nil(t, ws.Member("nobody"))
	require.Nil(t, ws.MemberByKey(userKey("nobody")))

	// The same member again, queues in another order, changes nothing.
	version := ws.Version
	out = w.must(&AddMember{Name: "runner", Role: RoleExecutor, PublicKey: userKey("runner"), Queues: []string{"test", "build"}})
	require.Empty(t, out.Changes)
	require.True(t, out.Reply.Duplicate)
	require.Equal(t, version, out.Reply.Version)
	w.requireReplays()
	w.requireReplaysFromWire()
}

// A member added again with another key, role or queues is replaced: a key
// rotation needs no removal, and the old key names nobody afterwards.
func TestAddMemberReplaces(t *testing.T) {
	w := setup(t)
	w.must(&AddMember{Name: "runner", Role: RoleExecutor, PublicKey: userKey("old"), Queues: []string{"build"}})
	w.advance(time.Hour)

	out := w.must(&AddMember{Name: "runner", Role: RoleExecutor, PublicKey: userKey("new"), Queues: []string{"build"}})
	require.Equal(t, []string{"workspace.member_added"}, events(out, w.ws), "a rotation is recorded as the member added again")
	ws := w.workspace()
	require.Len(t, ws.Members, 1)
	require.Nil(t, ws.MemberByKey(userKey("old")), "the old key names nobody")
	require.Equal(t, "runner", ws.MemberByKey(userKey("new")).Name)
	require.Equal(t, epoch.Add(time.Hour), ws.Member("runner").AddedAt, "added_at is when the member took this form")

	w.must(&AddMember{Name: "runner", Role: RoleExecutor, PublicKey: userKey("new"), Queues: []string{"build", "deploy"}})
	require.Equal(t, []string{"build", "deploy"}, w.workspace().Member("runner").Queues)
	w.must(&AddMember{Name: "runner", Role: RoleViewer, PublicKey: userKey("new")})
	m := w.workspace().Member("runner")
	require.Equal(t, RoleViewer, m.Role)
	require.Empty(t, m.Queues, "a viewer has no queues")
	require.Len(t, w.workspace().Members, 1)
	w.requireReplays()
	w.requireReplaysFromWire()
}

func TestAddMemberRefusesInvalid(t *testing.T) {
	w := setup(t)
	key := userKey("k")
	many := make([]string, MaxMemberQueues+1)
	for i := range many {
		many[i] = fmt.Sprintf("q%d", i)
	}
	for _, tc := range []struct {
		name  string
		cmd   AddMember
		field string
	}{
		{"empty name", AddMember{Name: "", Role: RoleAdmin, PublicKey: key}, "/name"},
		{"upper-case name", AddMember{Name: "Ops", Role: RoleAdmin, PublicKey: key}, "/name"},
		{"name with a dot", AddMember{Name: "ops.1", Role: RoleAdmin, PublicKey: key}, "/name"},
		{"no role", AddMember{Name: "ops", PublicKey: key}, "/role"},
		{"unknown role", AddMember{Name: "ops", Role: "owner", PublicKey: key}, "/role"},
		{"role in upper case", AddMember{Name: "ops", Role: "Admin", PublicKey: key}, "/role"},
		{"no key", AddMember{Name: "ops", Role: RoleAdmin}, "/public_key"},
		{"an Ed25519 key in base64", AddMember{Name: "ops", Role: RoleAdmin, PublicKey: pubOf(keyOf("ops"))}, "/public_key"},
		{"an account key", AddMember{Name: "ops", Role: RoleAdmin, PublicKey: encodeKey(0, make([]byte, 32))}, "/public_key"},
		{"a mistyped key", AddMember{Name: "ops", Role: RoleAdmin, PublicKey: key[:20] + string('A'+(key[20]-'A'+1)%26) + key[21:]}, "/public_key"},
		{"queues for an admin", AddMember{Name: "ops", Role: RoleAdmin, PublicKey: key, Queues: []string{"build"}}, "/queues"},
		{"queues for a client", AddMember{Name: "ops", Role: RoleClient, PublicKey: key, Queues: []string{"build"}}, "/queues"},
		{"queues for a viewer", AddMember{Name: "ops", Role: RoleViewer, PublicKey: key, Queues: []string{"build"}}, "/queues"},
		{"an executor without queues", AddMember{Name: "ops", Role: RoleExecutor, PublicKey: key}, "/queues"},
		{"an executor with an empty list", AddMember{Name: "ops", Role: RoleExecutor, PublicKey: key, Queues: []string{}}, "/queues"},
		{"too many queues", AddMember{Name: "ops", Role: RoleExecutor, PublicKey: key, Queues: many}, "/queues"},
		{"an invalid queue", AddMember{Name: "ops", Role: RoleExecutor, PublicKey: key, Queues: []string{"build", "Build Two"}}, "/queues/1"},
		{"a queue twice", AddMember{Name: "ops", Role: RoleExecutor, PublicKey: key, Queues: []string{"a", "b", "a"}}, "/queues/2"},
		{"the admin's name", AddMember{Name: "admin", Role: RoleAdmin, PublicKey: key}, "/name"},
		{"the anonymous caller's name", AddMember{Name: "anonymous", Role: RoleClient, PublicKey: key}, "/name"},
		{"the service's name", AddMember{Name: "dwr", Role: RoleClient, PublicKey: key}, "/name"},
		{"a name of the service's own commands", AddMember{Name: "dwr-timer", Role: RoleClient, PublicKey: key}, "/name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.cmd
			require.Equal(t, tc.field, w.refused(&c, CodeInvalid).Field)
		})
	}
	w.must(&AddMember{Name: "ops", Role: RoleExecutor, PublicKey: key, Queues: many[:MaxMemberQueues]})
	w.must(&AddMember{Name: "dwrite", Role: RoleClient, PublicKey: userKey("dwrite")}) // only dwr and dwr-… are the service's
}

// A key names at most one member of a workspace; it may be a member of
// several workspaces.
func TestMemberKeys(t *testing.T) {
	w := setup(t)
	key := userKey("shared")
	w.must(&AddMember{Name: "alice", Role: RoleAdmin, PublicKey: key})
	e := w.refused(&AddMember{Name: "bob", Role: RoleViewer, PublicKey: key}, CodeConflict)
	require.Equal(t, "/public_key", e.Field)
	require.Contains(t, e.Message, `"alice"`)
	w.must(&AddMember{Name: "bob", Role: RoleViewer, PublicKey: userKey("bob")})
	require.Equal(t, "/public_key", w.refused(&AddMember{Name: "bob", Role: RoleViewer, PublicKey: key}, CodeConflict).Field,
		"nor may a rotation take another member's key")

	// Once alice is removed, her key may name bob.
	w.must(&RemoveMember{Name: "alice"})
	w.must(&AddMember{Name: "bob", Role: RoleViewer, PublicKey: key})
	require.Equal(t, "bob", w.workspace().MemberByKey(key).Name)

	// The same key in another workspace, under another name and role.
	acme := w.ws
	w.ws = "beta"
	w.must(&CreateWorkspace{Name: "beta"})
	w.must(&AddMember{Name: "robot", Role: RoleExecutor, PublicKey: key, Queues: []string{"build"}})
	require.Equal(t, "robot", w.workspace().MemberByKey(key).Name)
	w.ws = acme
	require.Equal(t, "bob", w.workspace().MemberByKey(key).Name, "each workspace has its own members")
	w.requireReplays()
}

func TestRemoveMember(t *testing.T) {
	w := setup(t)
	w.must(&AddMember{Name: "alice", Role: RoleAdmin, PublicKey: userKey("alice")})
	w.must(&AddMember{Name: "bob", Role: RoleClient, PublicKey: userKey("bob")})

	out := w.must(&RemoveMember{Name: "alice"})
	require.Equal(t, []string{"workspace.member_removed"}, events(out, w.ws))
	require.Equal(t, &MemberRemoved{Name: "alice"}, out.Changes[0].Event)
	ws := w.workspace()
	require.Nil(t, ws.Member("alice"))
	require.Nil(t, ws.MemberByKey(userKey("alice")))
	require.NotNil(t, ws.Member("bob"))

	e := w.refused(&RemoveMember{Name: "alice"}, CodeNotFound)
	require.Equal(t, "/name", e.Field, "a member removed is not found any more")
	require.Equal(t, "/name", w.refused(&RemoveMember{Name: "carol"}, CodeNotFound).Field)
	require.Equal(t, "/name", w.refused(&RemoveMember{Name: "Not A Name"}, CodeInvalid).Field)

	// A retry of the removal under its command id is a duplicate, not a
	// not_found.
	id := w.nextCommandID()
	_, err := w.runID(id, &RemoveMember{Name: "bob"})
	require.NoError(t, err)
	w.duplicate(id, &RemoveMember{Name: "bob"})
	require.Empty(t, w.workspace().Members)

	w.must(&AddMember{Name: "alice", Role: RoleViewer, PublicKey: userKey("alice")})
	require.Equal(t, RoleViewer, w.workspace().Member("alice").Role)
	w.requireReplays()
	w.requireReplaysFromWire()
}

func TestMemberCommandsNeedTheWorkspace(t *testing.T) {
	w := newWorld(t)
	_ = w.refused(&AddMember{Name: "alice", Role: RoleAdmin, PublicKey: userKey("alice")}, CodeNotFound)
	_ = w.refused(&RemoveMember{Name: "alice"}, CodeNotFound)
	_ = w.refused(&ConfigureQueue{Queue: "build", LeaseMS: 30_000, MaxDeliver: 5}, CodeNotFound)
	_ = w.refused(&RevokeApprover{Name: "alice"}, CodeNotFound)
}

func TestMemberApplyRefusesBrokenHistory(t *testing.T) {
	ws := &Workspace{Name: "acme", Version: 1}
	_, err := ApplyWorkspace(ws, "acme", &MemberRemoved{Name: "ghost"}, Recorded{Time: epoch})
	require.Error(t, err)
	_, err = ApplyWorkspace(ws, "acme", &ApproverRevoked{Name: "ghost"}, Recorded{Time: epoch})
	require.Error(t, err)
	_, err = ApplyWorkspace(nil, "acme", &MemberAdded{Name: "a", Role: RoleAdmin, PublicKey: userKey("a")}, Recorded{Time: epoch})
	require.Error(t, err, "a member of a workspace that was never created")
}

// Clone copies the members deeply: applying to the copy leaves the original
// as it was.
func TestWorkspaceCloneIsDeep(t *testing.T) {
	w := setup(t)
	w.must(&AddMember{Name: "runner", Role: RoleExecutor, PublicKey: userKey("runner"), Queues: []string{"build"}})
	w.must(&ConfigureQueue{Queue: "build", LeaseMS: 30_000, MaxDeliver: 5})
	orig := w.workspace()
	c := orig.Clone()
	c.Members[0].Queues[0] = "changed"
	c.Queues[0].LeaseMS = 1
	require.Equal(t, "build", orig.Members[0].Queues[0])
	require.Equal(t, int64(30_000), orig.Queues[0].LeaseMS)
}

// bounded is a World that bounds every workspace's members to most.
type bounded struct {
	World
	most int
}

func (b bounded) MaxMembers() int { return b.most }

// A workspace may have so many members: a member.add of a new member past
// the bound is refused, naming /name and what to do, and records nothing;
// a member there already may still be changed (a new key, another role),
// and a revoked member's place is free again.
func TestMembersAreBoundedPerWorkspace(t *testing.T) {
	w := setup(t)
	inner := w.o
	w.o = NewOverlay(bounded{World: inner, most: 2})
	w.must(&AddMember{Name: "a", Role: RoleViewer, PublicKey: userKey("a")})
	w.must(&AddMember{Name: "b", Role: RoleViewer, PublicKey: userKey("b")})
	e := w.refused(&AddMember{Name: "c", Role: RoleViewer, PublicKey: userKey("c")}, CodeConflict)
	require.Equal(t, "/name", e.Field)
	require.Contains(t, e.Message, "has 2 members")
	require.Contains(t, e.Message, "dwr users revoke")
	require.Contains(t, e.Message, "--max-members-per-workspace")
	out := w.must(&AddMember{Name: "b", Role: RoleClient, PublicKey: userKey("b2")})
	require.NotEmpty(t, out.Changes, "a member there already is changed")
	w.must(&RemoveMember{Name: "a"})
	w.must(&AddMember{Name: "c", Role: RoleViewer, PublicKey: userKey("c")})

	w.o = NewOverlay(inner) // a World without the bound bounds none
	w.must(&AddMember{Name: "d", Role: RoleViewer, PublicKey: userKey("d")})
}
