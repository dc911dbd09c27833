package domain

import (
	"encoding/base32"
	"fmt"
	"slices"
	"strings"

	"github.com/dwr-run/dwr/schemas"
)

// Member is an identity with a role in a workspace: the NATS user (an
// nkey) that connects, the role that says what it may send, and for an
// executor the queues it may work (schemas.Member, with MayWork; Workspace's
// Member and MemberByKey find one).
type Member = schemas.Member

// MaxMemberQueues bounds the queues of one executor.
const MaxMemberQueues = 100

// userKeyPrefix is the first byte of a NATS user's public nkey (20<<3: its
// base32 starts with "U").
const userKeyPrefix = 20 << 3

// userKeyLen is the length of a NATS public nkey: the base32, without
// padding, of a prefix byte, a 32-byte Ed25519 key and a 2-byte checksum.
const userKeyLen = 56

// ValidUserKey reports whether pub is a NATS user's public nkey, as the NATS
// server reads it: 56 characters of base32 (A-Z, 2-7), no padding, that
// decode to the user prefix byte, a 32-byte key and the CRC-16 of both
// (little-endian). The checksum catches a mistyped key.
func ValidUserKey(pub string) bool {
	if len(pub) != userKeyLen || pub[0] != 'U' {
		return false
	}
	for i := 0; i < len(pub); i++ {
		if c := pub[i]; (c < 'A' || c > 'Z') && (c < '2' || c > '7') {
			return false
		}
	}
	raw, err := base32.StdEncoding.WithPadding(base32.NoPadding).DecodeString(pub)
	if err != nil || len(raw) != 35 || raw[0] != userKeyPrefix {
		return false
	}
	return crc16(raw[:33]) == uint16(raw[33])|uint16(raw[34])<<8
}

// crc16 is the CRC-16/XMODEM (polynomial 0x1021, initial value 0) that nkeys
// append to the keys they encode.
func crc16(data []byte) uint16 {
	var crc uint16
	for _, b := range data {
		crc ^= uint16(b) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// MemberBound is a World that bounds the members of each workspace: every
// member is a user of the NATS server, whose users are rebuilt from the
// workspace's members at each change of them, and every command of the
// workspace reads them. A World without it bounds none.
type MemberBound interface {
	MaxMembers() int
}

// MaxMembers is the base's bound on a workspace's members (MemberBound),
// 0 when it has none.
func (o *Overlay) MaxMembers() int {
	if mb, ok := o.base.(MemberBound); ok {
		return mb.MaxMembers()
	}
	return 0
}

// sameQueues reports whether a and b hold the same queues, in any order.
func sameQueues(a, b []string) bool {
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}

// validateMember checks a member.add command.
// ReservedName reports whether name is one the service acts under, which
// no member may take: "admin" (the service's admins), "anonymous" (every
// caller of a server open to anyone), "dwr" and "dwr-…" (the service's own
// commands: its timers, retention, quarantine). A command's actor is
// recorded by name, so a member of such a name would read as the service.
func ReservedName(name string) bool {
	return name == "admin" || name == "anonymous" || name == "dwr" || strings.HasPrefix(name, "dwr-")
}

func validateMember(c *AddMember) error {
	if err := checkName("/name", "member", c.Name); err != nil {
		return err
	}
	if ReservedName(c.Name) {
		return invalid("/name", "%q is a name the service itself acts under (its admin, the anonymous caller of an open server, its own commands: dwr, dwr-…): "+
			"a member so named would read as the service in the log and in who created a task; choose another", c.Name)
	}
	if !ValidRole(c.Role) {
		roles := make([]string, len(Roles))
		for i, r := range Roles {
			roles[i] = string(r)
		}
		return invalid("/role", "role %q is not one of %s", c.Role, strings.Join(roles, ", "))
	}
	if !ValidUserKey(c.PublicKey) {
		return invalid("/public_key", "is not a NATS user's public nkey: 56 characters of base32 (A-Z, 2-7) starting with \"U\", with a valid checksum (nsc or nk -gen user prints one)")
	}
	switch {
	case c.Role != RoleExecutor && len(c.Queues) > 0:
		return invalid("/queues", "only an executor has queues; role %q works on none", c.Role)
	case c.Role == RoleExecutor && len(c.Queues) == 0:
		return invalid("/queues", "an executor needs at least one queue to work on")
	case len(c.Queues) > MaxMemberQueues:
		return invalid("/queues", "has %d queues; at most %d are allowed", len(c.Queues), MaxMemberQueues)
	}
	for i, q := range c.Queues {
		f := fmt.Sprintf("/queues/%d", i)
		if err := checkName(f, "queue", q); err != nil {
			return err
		}
		if slices.Index(c.Queues, q) != i {
			return invalid(f, "queue %q is listed twice", q)
		}
	}
	return nil
}

// addMember adds a member, or replaces the member of the same name when its
// role, key or queues differ (a key rotation needs no removal first). The
// same member again changes nothing. A key names at most one member of a
// workspace, so that the identity NATS authenticates says who acts.
func (x *tx) addMember(c *AddMember) (Reply, error) {
	w, dup, err := x.commandWorkspace()
	if err != nil || dup {
		return duplicateWorkspaceOr(w, err)
	}
	if err := validateMember(c); err != nil {
		return Reply{}, err
	}
	if m := w.MemberByKey(c.PublicKey); m != nil && m.Name != c.Name {
		return Reply{}, &Error{Code: CodeConflict, Field: "/public_key",
			Message: fmt.Sprintf("the key is member %q's in workspace %q: a key names one member (remove %q first, or give it another key)", m.Name, w.Name, m.Name)}
	}
	m := w.Member(c.Name)
	if m != nil && m.Role == c.Role && m.PublicKey == c.PublicKey && sameQueues(m.Queues, c.Queues) {
		return workspaceReply(w, true), nil
	}
	if most := x.o.MaxMembers(); m == nil && most > 0 && len(w.Members) >= most {
		return Reply{}, &Error{Code: CodeConflict, Field: "/name", Message: fmt.Sprintf(
			"workspace %q has %d members, the most it may have: revoke one it no longer needs first (dwr users list; dwr users revoke NAME; the bound is dwr serve --max-members-per-workspace)",
			w.Name, len(w.Members))}
	}
	return x.emitWorkspace(w, &MemberAdded{Name: c.Name, Role: c.Role, PublicKey: c.PublicKey, Queues: slices.Clone(c.Queues)})
}

func (x *tx) removeMember(c *RemoveMember) (Reply, error) {
	w, dup, err := x.commandWorkspace()
	if err != nil || dup {
		return duplicateWorkspaceOr(w, err)
	}
	if err := checkName("/name", "member", c.Name); err != nil {
		return Reply{}, err
	}
	if w.Member(c.Name) == nil {
		return Reply{}, notFound("/name", "member %q not found in workspace %q", c.Name, w.Name)
	}
	return x.emitWorkspace(w, &MemberRemoved{Name: c.Name})
}
