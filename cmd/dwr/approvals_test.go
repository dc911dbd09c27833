package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/schemas"
)

func TestCLIKeysCreateWritesAPrivateKeyAndRegistersIt(t *testing.T) {
	url := cliServer(t)
	file := filepath.Join(t.TempDir(), "alice.pem")
	code, out, errs := run(t, url, "keys", "create", "alice", "--role", "ops", "--out", file)
	require.Equal(t, 0, code, errs)

	st, err := os.Stat(file)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "the private key is readable by its owner only")
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	block, _ := pem.Decode(b)
	require.NotNil(t, block)
	require.Equal(t, "PRIVATE KEY", block.Type)
	require.Empty(t, block.Headers, "a standard PKCS #8 block, as openssl and WebCrypto read it")
	require.Contains(t, string(b), "# approver: alice\n# workspace: default\n-----BEGIN PRIVATE KEY-----")
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	require.NoError(t, err)
	keyID := domain.KeyID(k.(ed25519.PrivateKey).Public().(ed25519.PublicKey))
	require.Contains(t, out, keyID)
	require.Contains(t, out, file)

	var as []domain.Approver
	runJSON(t, url, &as, "keys", "list")
	require.Len(t, as, 1)
	require.Equal(t, "alice", as[0].Name)
	require.Equal(t, "ops", as[0].Role)
	require.Equal(t, keyID, as[0].KeyID)
	code, out, errs = run(t, url, "keys", "list")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "KEY-ID")
	require.Contains(t, out, keyID)

	// An existing file is not replaced, unless --force says so.
	code, _, errs = run(t, url, "keys", "create", "alice", "--role", "ops", "--out", file)
	require.Equal(t, exitInvalid, code)
	require.Contains(t, errs, "--force")
	again, err := os.ReadFile(file)
	require.NoError(t, err)
	require.Equal(t, b, again)
	var k2 keyOut
	runJSON(t, url, &k2, "keys", "create", "alice", "--role", "ops", "--out", file, "--force")
	require.NotEqual(t, keyID, k2.KeyID)
	runJSON(t, url, &as, "keys", "list")
	require.Len(t, as, 1)
	require.Equal(t, k2.KeyID, as[0].KeyID, "registering a name again replaces its key")

	// A refused registration writes no file.
	bad := filepath.Join(t.TempDir(), "bad.pem")
	code, _, errs = run(t, url, "keys", "create", "Not A Name", "--role", "ops", "--out", bad)
	require.Equal(t, exitInvalid, code, errs)
	require.NoFileExists(t, bad)
	entries, err := os.ReadDir(filepath.Dir(bad))
	require.NoError(t, err)
	require.Empty(t, entries, "no temporary file is left behind")
}

func TestCLIKeysAddAcceptsAPEMOrBase64PublicKey(t *testing.T) {
	url := cliServer(t)
	dir := t.TempDir()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	der, err := x509.MarshalPKIXPublicKey(pub)
	require.NoError(t, err)
	pemFile := filepath.Join(dir, "bob.pub.pem")
	require.NoError(t, os.WriteFile(pemFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600))
	code, out, errs := run(t, url, "keys", "add", "bob", "--role", "finance", "--public-key", pemFile)
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, domain.KeyID(pub))

	pub2, _, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	b64File := filepath.Join(dir, "carol.pub")
	require.NoError(t, os.WriteFile(b64File, []byte(base64.StdEncoding.EncodeToString(pub2)+"\n"), 0o600))
	code, _, errs = run(t, url, "keys", "add", "carol", "--role", "ops", "--public-key", b64File)
	require.Equal(t, 0, code, errs)

	code, out, errs = run(t, url, "keys", "list")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, domain.KeyID(pub))
	require.Contains(t, out, domain.KeyID(pub2))

	// What is not a public key is refused before anything is sent.
	junk := filepath.Join(dir, "junk")
	require.NoError(t, os.WriteFile(junk, []byte("hello"), 0o600))
	code, _, errs = run(t, url, "keys", "add", "dan", "--role", "ops", "--public-key", junk)
	require.Equal(t, exitInvalid, code)
	require.Contains(t, errs, "neither a PEM \"PUBLIC KEY\"")
	pkcs8, err := x509.MarshalPKCS8PrivateKey(priv)
	require.NoError(t, err)
	privFile := filepath.Join(dir, "bob.pem")
	require.NoError(t, os.WriteFile(privFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}), 0o600))
	code, _, errs = run(t, url, "keys", "add", "dan", "--role", "ops", "--public-key", privFile)
	require.Equal(t, exitInvalid, code)
	require.Contains(t, errs, "PRIVATE key")
}

func TestCLIApproveDecidesAGatedTaskWithASignedDecision(t *testing.T) {
	url := cliServer(t)
	dir := t.TempDir()
	alice, bob := filepath.Join(dir, "alice.pem"), filepath.Join(dir, "bob.pem")
	code, _, errs := run(t, url, "keys", "create", "alice", "--role", "ops", "--out", alice)
	require.Equal(t, 0, code, errs)
	code, _, errs = run(t, url, "keys", "create", "bob", "--role", "finance", "--out", bob)
	require.Equal(t, 0, code, errs)

	input := `{"deploy": "v2", "to": "prod"}`
	var created domain.Reply
	runJSON(t, url, &created, "task", "create", "--queue", "deploys", "--title", "deploy v2", "--input", input,
		"--approval-role", "ops", "--approval-expires-in", "1h")
	require.Equal(t, domain.StateWaiting, created.State, "the gate waits for a person")
	taskID := created.ID

	code, out, errs := run(t, url, "approvals", "list")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "APPROVAL")
	require.Contains(t, out, taskID)
	require.Contains(t, out, "ops")
	require.Contains(t, out, "approve,reject")
	require.Contains(t, out, "in 59m")
	require.NotContains(t, out, "STATE", "pending is the default: no state column")
	var pending []approvalView
	runJSON(t, url, &pending, "approvals", "list", "--role", "ops")
	require.Len(t, pending, 1)
	ap := pending[0]
	require.Equal(t, domain.ApprovalID(taskID, 1), ap.ID)
	digest, err := domain.ActionDigest(json.RawMessage(input))
	require.NoError(t, err)
	require.Equal(t, digest, ap.ActionDigest)
	runJSON(t, url, &pending, "approvals", "list", "--role", "finance")
	require.Empty(t, pending)

	code, out, errs = run(t, url, "task", "get", taskID)
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "waiting for: approval "+ap.ID, "task get says what the task waits for")
	require.Contains(t, out, "pending")

	code, out, errs = run(t, url, "approvals", "get", ap.ID)
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, digest)
	require.Contains(t, out, `"deploy": "v2"`, "the action, pretty")
	require.Contains(t, out, "approve → resume")

	// Another role's key is refused, and the refusal is on record.
	code, out, errs = run(t, url, "approve", ap.ID, "--response", "approve", "--key", bob)
	require.Equal(t, exitConflict, code, out)
	require.Contains(t, errs, "unauthorized")
	require.Contains(t, out, digest, "the digest being signed is shown")
	var got approvalView
	runJSON(t, url, &got, "approvals", "get", ap.ID)
	require.Equal(t, domain.ApprovalStatePending, got.State)
	require.Len(t, got.Refusals, 1)
	require.Equal(t, domain.RefusedUnauthorized, got.Refusals[0].Reason)
	require.Equal(t, "bob", got.Refusals[0].Approver)
	code, out, _ = run(t, url, "approvals", "get", ap.ID)
	require.Equal(t, 0, code)
	require.Contains(t, out, "unauthorized")

	// No approver named, no decision.
	anon := filepath.Join(dir, "anon.pem")
	b, err := os.ReadFile(alice)
	require.NoError(t, err)
	block, _ := pem.Decode(b)
	require.NoError(t, os.WriteFile(anon, pem.EncodeToMemory(&pem.Block{Type: block.Type, Bytes: block.Bytes}), 0o600))
	code, _, errs = run(t, url, "approve", ap.ID, "--response", "approve", "--key", anon)
	require.Equal(t, exitInvalid, code)
	require.Contains(t, errs, "--as")
	code, _, errs = run(t, url, "approve", ap.ID, "--response", "maybe", "--key", alice)
	require.Equal(t, exitInvalid, code)
	require.Contains(t, errs, "approve, reject, revise, escalate")

	// The right key decides: the gate is passed, the task is ready.
	code, out, errs = run(t, url, "approve", ap.ID, "--response", "approve", "--key", alice, "--comment", "checked the diff")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, digest)
	require.Contains(t, out, "→ resume")
	require.Contains(t, out, "is ready")
	var task domain.Task
	runJSON(t, url, &task, "task", "get", taskID)
	require.Equal(t, domain.StateReady, task.State)

	// The same signed decision sent again changes nothing; another is refused.
	var dup decisionOut
	runJSON(t, url, &dup, "approve", ap.ID, "--response", "approve", "--key", alice)
	require.True(t, dup.Duplicate)
	require.Equal(t, domain.BranchResume, dup.Branch)
	code, _, errs = run(t, url, "approve", ap.ID, "--response", "reject", "--key", alice)
	require.Equal(t, exitConflict, code)
	require.Contains(t, errs, "already_decided")

	runJSON(t, url, &got, "approvals", "get", ap.ID)
	require.Equal(t, domain.ApprovalStateDecided, got.State)
	require.NotNil(t, got.Decision)
	require.Equal(t, "alice", got.Decision.Approver)
	require.Equal(t, "ops", got.Decision.Role)
	require.Equal(t, "checked the diff", got.Decision.Comment)
	require.Len(t, got.Refusals, 2)
	require.Equal(t, domain.RefusedAlreadyDecided, got.Refusals[1].Reason)

	code, out, errs = run(t, url, "approvals", "list")
	require.Equal(t, 0, code, errs)
	require.NotContains(t, out, ap.ID, "no longer pending")
	code, out, errs = run(t, url, "approvals", "list", "--state", "decided")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, ap.ID)
	require.Contains(t, out, "STATE")
	code, _, _ = run(t, url, "approvals", "list", "--state", "maybe")
	require.Equal(t, exitInvalid, code)
	code, _, _ = run(t, url, "approvals", "get", domain.ApprovalID(taskID, 9))
	require.Equal(t, exitNotFound, code)
}

func TestCLITaskCreateResolvesRelativeTimes(t *testing.T) {
	url := cliServer(t)
	before := time.Now()
	var r domain.Reply
	runJSON(t, url, &r, "task", "create", "--queue", "q", "--start-after", "1h", "--deadline-after", "2h")
	require.Equal(t, domain.StateWaiting, r.State)
	var task domain.Task
	runJSON(t, url, &task, "task", "get", r.ID)
	require.NotNil(t, task.Spec.StartAt)
	require.NotNil(t, task.Spec.Deadline)
	require.WithinRange(t, *task.Spec.StartAt, before.Add(time.Hour), time.Now().Add(time.Hour))
	require.WithinRange(t, *task.Spec.Deadline, before.Add(2*time.Hour), time.Now().Add(2*time.Hour))

	at := time.Now().Add(3 * time.Hour).UTC().Truncate(time.Second)
	runJSON(t, url, &r, "task", "create", "--queue", "q", "--deadline", at.Format(time.RFC3339))
	runJSON(t, url, &task, "task", "get", r.ID)
	require.NotNil(t, task.Spec.Deadline)
	require.True(t, at.Equal(*task.Spec.Deadline))

	code, _, errs := run(t, url, "task", "create", "--queue", "q", "--deadline", at.Format(time.RFC3339), "--deadline-after", "1h")
	require.Equal(t, exitInvalid, code)
	require.Contains(t, errs, "not both")
	code, _, errs = run(t, url, "task", "create", "--queue", "q", "--deadline-after", "soon")
	require.Equal(t, exitInvalid, code)
	require.Contains(t, errs, "--deadline-after")
	code, _, errs = run(t, url, "task", "create", "--queue", "q", "--approval-expires-in", "-1h")
	require.Equal(t, exitInvalid, code)
	require.Contains(t, errs, "--approval-expires-in")
}

func TestExpiresIsRelative(t *testing.T) {
	now := time.Now()
	at := func(d time.Duration) *time.Time { t := now.Add(d); return &t }
	require.Equal(t, "-", expires(nil, now))
	require.Equal(t, "in 59m", expires(at(time.Hour-time.Second), now))
	require.Equal(t, "in 30s", expires(at(30*time.Second), now))
	require.Equal(t, "in 5h3m", expires(at(5*time.Hour+3*time.Minute), now))
	require.Equal(t, "in 3d", expires(at(72*time.Hour), now))
	require.Equal(t, "expired 2m ago", expires(at(-2*time.Minute), now))
	require.True(t, strings.HasPrefix(short(strings.Repeat("x", 80), 50), strings.Repeat("x", 47)))
}

// An escalation's approval says which request it answers: the approval it
// escalated, and the role that request asked.
func TestCLIApprovalsGetShowsTheRequestAnEscalationAnswers(t *testing.T) {
	url := cliServer(t)
	alice := filepath.Join(t.TempDir(), "alice.pem")
	code, _, errs := run(t, url, "keys", "create", "alice", "--role", "ops", "--out", alice)
	require.Equal(t, 0, code, errs)
	var created domain.Reply
	runJSON(t, url, &created, "task", "create", "--queue", "deploys", "--input", `{"deploy": "v3"}`, "--approval-role", "ops",
		"--approval-responses", "approve,reject,escalate", "--approval-escalate-to", "finance")
	first := domain.ApprovalID(created.ID, 1)
	code, out, errs := run(t, url, "approve", first, "--response", "escalate", "--key", alice)
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "dwr approvals list --role finance")

	var second approvalView
	runJSON(t, url, &second, "approvals", "get", domain.ApprovalID(created.ID, 2))
	require.Equal(t, [3]string{"finance", first, "ops"}, [3]string{second.Role, second.EscalatedFrom, second.AskedRole})
	code, out, errs = run(t, url, "approvals", "get", second.ID)
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "decided by: an approver with role finance\nescalated:  from approval "+first+", asked of role ops")
	code, out, errs = run(t, url, "approvals", "get", first)
	require.Equal(t, 0, code, errs)
	require.NotContains(t, out, "escalated:", "the first request escalated nothing")
}

// A gate that needs two approvers of one role: the first approval says it
// waits for another, and the second decides.
func TestCLIApproveWithAQuorumOfTwo(t *testing.T) {
	url := cliServer(t)
	dir := t.TempDir()
	ada, bo := filepath.Join(dir, "ada.pem"), filepath.Join(dir, "bo.pem")
	for name, file := range map[string]string{"ada": ada, "bo": bo} {
		code, _, errs := run(t, url, "keys", "create", name, "--role", "ops", "--out", file)
		require.Equal(t, 0, code, errs)
	}
	var created domain.Reply
	runJSON(t, url, &created, "task", "create", "--queue", "deploys", "--input", `{"deploy": "v4"}`, "--approval-role", "ops", "--approval-quorum", "2")
	id := domain.ApprovalID(created.ID, 1)

	code, out, errs := run(t, url, "approve", id, "--response", "approve", "--key", ada)
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "approved by ada: 1 of the 2 distinct approvers it needs have approved; it waits for the others")
	code, out, errs = run(t, url, "approvals", "get", id)
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "decided by: 2 distinct approvers (approver with role ops)")
	require.Contains(t, out, "approved:   1 of 2 so far (ada ")
	code, out, errs = run(t, url, "approvals", "list")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "ops (1/2)", "the inbox shows how many have approved")

	var second decisionOut
	runJSON(t, url, &second, "approve", id, "--response", "approve", "--key", bo)
	require.Equal(t, [3]any{domain.BranchResume, domain.StateReady, false}, [3]any{second.Branch, second.TaskState, second.Waiting})
	var v approvalView
	runJSON(t, url, &v, "approvals", "get", id)
	require.Equal(t, "bo", v.Decision.Approver)
	require.Equal(t, "ada", v.SignOffs[0].Approver)
	code, _, _ = run(t, url, "task", "create", "--queue", "deploys", "--approval-quorum", "11")
	require.Equal(t, exitInvalid, code, "a quorum past 10 is refused")

	// A sign-off whose approver is revoked shows as not counted at once,
	// before any approval records it.
	runJSON(t, url, &created, "task", "create", "--queue", "deploys", "--approval-role", "ops", "--approval-quorum", "2")
	id = domain.ApprovalID(created.ID, 1)
	code, _, errs = run(t, url, "approve", id, "--response", "approve", "--key", ada)
	require.Equal(t, 0, code, errs)
	code, _, errs = run(t, url, "keys", "revoke", "ada")
	require.Equal(t, 0, code, errs)
	code, out, errs = run(t, url, "approvals", "get", id)
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "approved:   0 of 2 so far (-)")
	require.Contains(t, out, "not counted: ada (revoked, or registered again with another key, since approving)")
	var dropped approvalView
	runJSON(t, url, &dropped, "approvals", "get", id)
	require.Empty(t, dropped.SignOffs)
	require.Equal(t, "ada", dropped.DroppedSignOffs[0].Approver)
	code, out, errs = run(t, url, "approvals", "list")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "ops (0/2)", "the inbox counts what counts")
	var tk schemas.Task
	runJSON(t, url, &tk, "task", "get", created.ID)
	require.Equal(t, "ada", tk.Approvals[0].DroppedSignOffs[0].Approver, "task.get settles its approvals too")

	// The gate may exclude whoever created the task (here the anonymous
	// caller of an open server).
	runJSON(t, url, &created, "task", "create", "--queue", "deploys", "--approval-role", "ops", "--approval-exclude-requester")
	id = domain.ApprovalID(created.ID, 1)
	runJSON(t, url, &v, "approvals", "get", id)
	require.Equal(t, [2]any{"anonymous", true}, [2]any{v.RequestedBy, v.ExcludeRequester})
	code, out, errs = run(t, url, "approvals", "get", id)
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "decided by: an approver with role ops, not anonymous (who created the task)")
	code, out, errs = run(t, url, "task", "get", created.ID)
	require.Equal(t, 0, code, errs)
	require.Regexp(t, `created [0-9: -]+ by anonymous, updated`, out)
}
