package console_test

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/access"
	"github.com/dwr-run/dwr/handlers/console"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/schemas"
)

// env is a closed service (as dwr serve runs it) with the console in front
// of it on an httptest server.
type env struct {
	svc   *servicetest.Service
	admin *client.Client
	url   string
	con   *console.Console
}

func setup(t *testing.T, adjust ...func(*console.Config)) *env {
	t.Helper()
	s := servicetest.Start(t, "", servicetest.Options{Secure: true})
	cfg := console.Config{NATSOptions: []nats.Option{nats.InProcessServer(s.Server.OtherClients())}, Logger: servicetest.Logger()}
	for _, f := range adjust {
		f(&cfg)
	}
	c, err := console.New(cfg)
	require.NoError(t, err)
	ts := httptest.NewServer(c)
	t.Cleanup(ts.Close)
	t.Cleanup(func() { require.NoError(t, c.Close()) }) // first: it ends the streams ts.Close waits for
	return &env{svc: s, admin: client.New(s.Admin), url: ts.URL, con: c}
}

// member adds name with role to the default workspace and returns the path
// of its credential file, as dwr users add writes it.
func (e *env) member(t *testing.T, name string, role schemas.Role) string {
	t.Helper()
	cred, err := access.NewCredential()
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), name+".creds")
	require.NoError(t, cred.Write(path, name+" ("+string(role)+") of workspace default", false))
	servicetest.Must(t, e.svc.Admin, "default", "member.add", schemas.AddMember{Name: name, Role: role, PublicKey: cred.PublicKey})
	return path
}

// browser is a person's browser on the console: a cookie jar, and the
// console's header and origin on what it posts.
type browser struct {
	t       *testing.T
	url     string
	hc      *http.Client
	cookies []*http.Cookie // the last response's
}

func (e *env) browser(t *testing.T) *browser {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &browser{t: t, url: e.url, hc: &http.Client{Jar: jar, Timeout: 30 * time.Second}}
}

// signedIn is a browser signed in with the credential file credsFile; the
// sign-in must succeed.
func (e *env) signedIn(t *testing.T, credsFile string) *browser {
	t.Helper()
	b := e.browser(t)
	code, er := b.signIn(credsFile)
	require.Equal(t, http.StatusOK, code, er.Error.Message)
	return b
}

// do sends a request and returns its status and decoded body (into out
// when it is not nil).
func (b *browser) do(req *http.Request, out any) (int, apiErr) {
	b.t.Helper()
	resp, err := b.hc.Do(req)
	require.NoError(b.t, err)
	defer resp.Body.Close()
	b.cookies = resp.Cookies()
	body, err := io.ReadAll(resp.Body)
	require.NoError(b.t, err)
	var e apiErr
	if resp.StatusCode >= 300 {
		require.NoError(b.t, json.Unmarshal(body, &e), "%s", body)
	} else if out != nil {
		require.NoError(b.t, json.Unmarshal(body, out), "%s", body)
	}
	return resp.StatusCode, e
}

type apiErr struct {
	Error struct {
		Code    string               `json:"code"`
		Message string               `json:"message"`
		Fields  []schemas.FieldError `json:"fields"`
	} `json:"error"`
}

func (b *browser) get(path string, out any) (int, apiErr) {
	req, err := http.NewRequest(http.MethodGet, b.url+path, nil)
	require.NoError(b.t, err)
	return b.do(req, out)
}

// post posts body as the console's page does: with its header and from its
// origin.
func (b *browser) post(path string, body any, out any) (int, apiErr) {
	return b.postWith(path, body, out, map[string]string{console.HeaderCSRF: "1", "Origin": b.url})
}

func (b *browser) postWith(path string, body any, out any, headers map[string]string) (int, apiErr) {
	raw, ok := body.([]byte)
	if !ok {
		var err error
		raw, err = json.Marshal(body)
		require.NoError(b.t, err)
	}
	req, err := http.NewRequest(http.MethodPost, b.url+path, strings.NewReader(string(raw)))
	require.NoError(b.t, err)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	return b.do(req, out)
}

// signIn signs in as the page does: it reads the credential file, sends
// its public key, signs the NATS server's nonce with its seed and sends the
// signature. The seed never leaves.
func (b *browser) signIn(credsFile string) (int, apiErr) {
	b.t.Helper()
	data, err := os.ReadFile(credsFile)
	require.NoError(b.t, err)
	kp, err := nkeys.ParseDecoratedUserNKey(data)
	require.NoError(b.t, err)
	defer kp.Wipe()
	pub, err := kp.PublicKey()
	require.NoError(b.t, err)
	return b.signInWith(pub, kp.Sign)
}

// signInWith signs in as pub, signing the nonce with sign.
func (b *browser) signInWith(pub string, sign func([]byte) ([]byte, error)) (int, apiErr) {
	b.t.Helper()
	var ch struct {
		Challenge string `json:"challenge"`
		Nonce     string `json:"nonce"`
	}
	code, er := b.post("/api/signin", map[string]string{"workspace": "default", "public_key": pub, "about": "a test's"}, &ch)
	if code != http.StatusOK {
		return code, er
	}
	nonce, err := base64.StdEncoding.DecodeString(ch.Nonce)
	require.NoError(b.t, err)
	sig, err := sign(nonce)
	require.NoError(b.t, err)
	return b.post("/api/signin/"+ch.Challenge, map[string]string{"signature": base64.StdEncoding.EncodeToString(sig)}, nil)
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// A good credential signs in (an HttpOnly, SameSite=Strict session cookie);
// a file that is no credential, and one the server does not know, do not;
// without a session nothing is answered.
func TestSignIn(t *testing.T) {
	e := setup(t)
	b := e.browser(t)
	code, _ := b.get("/api/goals", nil)
	require.Equal(t, http.StatusUnauthorized, code)

	code, er := b.post("/api/signin", map[string]string{"public_key": "not a key"}, nil)
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, er.Error.Message, "/public_key")
	code, er = b.post("/api/signin", map[string]string{"workspace": "Not A Name", "public_key": "x"}, nil)
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, er.Error.Message, "/workspace")

	// The admin's key with a signature of another key, and a key the
	// server does not know, are refused by the NATS server.
	admin, err := nkeys.ParseDecoratedUserNKey(mustRead(t, filepath.Join(e.svc.Dir, access.AdminCredsFile)))
	require.NoError(t, err)
	adminPub, err := admin.PublicKey()
	require.NoError(t, err)
	other, err := nkeys.CreateUser()
	require.NoError(t, err)
	code, er = b.signInWith(adminPub, other.Sign)
	require.Equal(t, http.StatusUnauthorized, code, er.Error.Message)
	stranger, err := access.NewCredential()
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "stranger.creds")
	require.NoError(t, stranger.Write(path, "nobody", false))
	code, er = b.signIn(path)
	require.Equal(t, http.StatusUnauthorized, code, er.Error.Message)
	code, er = b.post("/api/signin/"+strings.Repeat("0", 64), map[string]string{"signature": base64.StdEncoding.EncodeToString(make([]byte, 64))}, nil)
	require.Equal(t, http.StatusNotFound, code, "no such challenge: %s", er.Error.Message)

	code, er = b.signIn(filepath.Join(e.svc.Dir, access.AdminCredsFile))
	require.Equal(t, http.StatusOK, code, er.Error.Message)
	var session *http.Cookie
	for _, c := range b.cookies {
		if c.Name == console.CookieName {
			session = c
		}
	}
	require.NotNil(t, session)
	require.True(t, session.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, session.SameSite)
	require.Len(t, session.Value, 64, "256 random bits, as hex")

	var who struct {
		Workspace string `json:"workspace"`
		PublicKey string `json:"public_key"`
	}
	code, _ = b.get("/api/me", &who)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "default", who.Workspace)
	pub, err := access.CredentialKey(filepath.Join(e.svc.Dir, access.AdminCredsFile))
	require.NoError(t, err)
	require.Equal(t, pub, who.PublicKey)
	var goals []schemas.GoalView
	code, _ = b.get("/api/goals", &goals)
	require.Equal(t, http.StatusOK, code)

	code, _ = b.post("/api/signout", nil, nil)
	require.Equal(t, http.StatusNoContent, code)
	code, _ = b.get("/api/goals", nil)
	require.Equal(t, http.StatusUnauthorized, code, "signed out")
}

const (
	roleViewer   schemas.Role = "viewer"
	roleApprover schemas.Role = "approver"
)

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

// gatedTask creates a task that waits for an approval by role ops, and
// registers approver name (role ops) with a fresh key. The approval is the
// task's first: its id is the task's with "-1".
func (e *env) gatedTask(t *testing.T, approver string) (taskID, approvalID string, key ed25519.PrivateKey) {
	t.Helper()
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	_, err = e.admin.RegisterApprover(ctx(t), schemas.RegisterApprover{Name: approver, Role: "ops", PublicKey: base64.StdEncoding.EncodeToString(pub)})
	require.NoError(t, err)
	r, err := e.admin.CreateTask(ctx(t), schemas.TaskSpec{Queue: "payments", Title: "refund order 7",
		Input: json.RawMessage(`{"refund": 120.50, "order": "o-7"}`), Approval: &schemas.ApprovalSpec{Role: "ops"}})
	require.NoError(t, err)
	require.Equal(t, schemas.StateWaiting, r.State)
	return r.ID, r.ID + "-1", key
}

// waitApproval waits until the admin reads approval id in state.
func (e *env) waitApproval(t *testing.T, id, state string) *schemas.ApprovalView {
	t.Helper()
	var a *schemas.ApprovalView
	require.Eventually(t, func() bool {
		var err error
		a, err = e.admin.Approval(ctx(t), id)
		return err == nil && a.State == state
	}, 10*time.Second, 20*time.Millisecond)
	return a
}

// sign signs a decision as the page does with WebCrypto.
func sign(key ed25519.PrivateKey, approvalID, response, digest string) string {
	msg := "dwr approval decision v1\n" + approvalID + "\n" + response + "\n" + digest
	return base64.StdEncoding.EncodeToString(ed25519.Sign(key, []byte(msg)))
}

// A viewer reads but cannot cancel or decide: the refusal is the service's
// own (forbidden, with its reason), and nothing changes.
func TestViewerCannotCancelOrDecide(t *testing.T) {
	e := setup(t)
	taskID, approvalID, key := e.gatedTask(t, "alice")
	b := e.signedIn(t, e.member(t, "vera", roleViewer))

	var tl struct {
		Task schemas.Task `json:"task"`
	}
	code, _ := b.get("/api/tasks/"+taskID, &tl)
	require.Equal(t, http.StatusOK, code, "a viewer reads")
	require.Equal(t, schemas.StateWaiting, tl.Task.State)

	code, er := b.post("/api/tasks/"+taskID+"/cancel", map[string]string{"reason": "vera tries"}, nil)
	require.Equal(t, http.StatusForbidden, code)
	require.Equal(t, schemas.CodeForbidden, er.Error.Code)
	require.NotEmpty(t, er.Error.Message)

	var page struct {
		Approval schemas.ApprovalView `json:"approval"`
	}
	code, _ = b.get("/api/approvals/"+approvalID, &page)
	require.Equal(t, http.StatusOK, code)
	d := page.Approval.ActionDigest
	code, er = b.post("/api/approvals/"+approvalID+"/decide", map[string]string{"approver": "alice", "response": "approve",
		"action_digest": d, "signature": sign(key, approvalID, "approve", d)}, nil)
	require.Equal(t, http.StatusForbidden, code, "a viewer holding an approver's key still cannot decide")
	require.Equal(t, schemas.CodeForbidden, er.Error.Code)

	task, err := e.admin.Task(ctx(t), taskID)
	require.NoError(t, err)
	require.Equal(t, schemas.StateWaiting, task.State, "nothing changed")
	a, err := e.admin.Approval(ctx(t), approvalID)
	require.NoError(t, err)
	require.Equal(t, schemas.ApprovalStatePending, a.State)
}

// An approver signed in decides with a signature made from the action's
// digest (as the page makes it); the decision is in the log, by that
// approver.
func TestApproverDecides(t *testing.T) {
	e := setup(t)
	taskID, approvalID, key := e.gatedTask(t, "alice")
	b := e.signedIn(t, e.member(t, "alice", roleApprover))

	// An approver reads the task, not its history, nor the goals.
	var tl struct {
		Task  schemas.Task `json:"task"`
		Chain struct {
			Withheld string `json:"withheld"`
		} `json:"chain"`
	}
	code, _ := b.get("/api/tasks/"+taskID, &tl)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, taskID, tl.Task.ID)
	require.NotEmpty(t, tl.Chain.Withheld)
	code, er := b.get("/api/goals", nil)
	require.Equal(t, http.StatusForbidden, code, er.Error.Message)

	var inbox []schemas.ApprovalView
	code, _ = b.get("/api/approvals", &inbox)
	require.Equal(t, http.StatusOK, code)
	require.Len(t, inbox, 1)
	var page struct {
		Approval   schemas.ApprovalView `json:"approval"`
		ActionText string               `json:"action_text"`
		DigestOK   bool                 `json:"digest_ok"`
	}
	code, _ = b.get("/api/approvals/"+approvalID, &page)
	require.Equal(t, http.StatusOK, code)
	require.True(t, page.DigestOK)
	require.Contains(t, page.ActionText, "120.50", "the action's text as the service holds it, numbers as written")
	d, err := schemas.ActionDigest(json.RawMessage(page.ActionText))
	require.NoError(t, err)
	require.Equal(t, page.Approval.ActionDigest, d)

	// A signature over another response is refused by the service.
	code, er = b.post("/api/approvals/"+approvalID+"/decide", map[string]string{"approver": "alice", "response": "approve",
		"action_digest": d, "signature": sign(key, approvalID, "reject", d)}, nil)
	require.Equal(t, http.StatusForbidden, code, er.Error.Message)

	var res schemas.CommandResult
	code, er = b.post("/api/approvals/"+approvalID+"/decide", map[string]string{"approver": "alice", "response": "approve",
		"action_digest": d, "signature": sign(key, approvalID, "approve", d), "comment": "ok"}, &res)
	require.Equal(t, http.StatusOK, code, er.Error.Message)
	require.Equal(t, schemas.StateReady, res.State)
	a := e.waitApproval(t, approvalID, schemas.ApprovalStateDecided)
	require.Equal(t, schemas.ApprovalStateDecided, a.State)
	require.Equal(t, "alice", a.Decision.Approver)
	require.Equal(t, "approve", a.Decision.Response)
}

// A state-changing request without the console's header, or from another
// origin, or for another host name, is refused before it reaches dwr:
// nothing changes.
func TestCrossSiteRequestsAreRefused(t *testing.T) {
	e := setup(t)
	r, err := e.admin.CreateTask(ctx(t), schemas.TaskSpec{Queue: "q"})
	require.NoError(t, err)
	b := e.signedIn(t, filepath.Join(e.svc.Dir, access.AdminCredsFile))

	cancel := "/api/tasks/" + r.ID + "/cancel"
	code, er := b.postWith(cancel, map[string]string{}, nil, map[string]string{"Origin": e.url})
	require.Equal(t, http.StatusForbidden, code)
	require.Equal(t, "csrf", er.Error.Code)
	require.Contains(t, er.Error.Message, console.HeaderCSRF)
	code, er = b.postWith(cancel, map[string]string{}, nil, map[string]string{console.HeaderCSRF: "1", "Origin": "http://evil.example"})
	require.Equal(t, http.StatusForbidden, code)
	require.Contains(t, er.Error.Message, "evil.example")
	code, _ = b.postWith(cancel, map[string]string{}, nil, map[string]string{console.HeaderCSRF: "1"})
	require.Equal(t, http.StatusForbidden, code, "no origin at all")

	req, err := http.NewRequest(http.MethodGet, e.url+"/api/goals", nil)
	require.NoError(t, err)
	req.Host = "rebound.evil.example"
	code, er = b.do(req, nil)
	require.Equal(t, http.StatusMisdirectedRequest, code, "a DNS-rebound name is not answered")
	require.Contains(t, er.Error.Message, "--console-host")

	task, err := e.admin.Task(ctx(t), r.ID)
	require.NoError(t, err)
	require.Equal(t, schemas.StateReady, task.State, "nothing changed")

	code, _ = b.post(cancel, map[string]string{"reason": "by the page"}, nil)
	require.Equal(t, http.StatusOK, code, "the page's own request goes through")
	require.Eventually(t, func() bool { // another connection's read: the views may be a moment behind
		task, err := e.admin.Task(ctx(t), r.ID)
		return err == nil && task.State == schemas.StateCancelled
	}, 10*time.Second, 20*time.Millisecond, "the task is cancelled")
}

// A body past the bound is refused before it is decoded.
func TestBodiesAreBounded(t *testing.T) {
	e := setup(t)
	b := e.browser(t)
	big := []byte(`{"public_key":"` + strings.Repeat("x", console.MaxRequestBytes) + `"}`)
	code, er := b.post("/api/signin", big, nil)
	require.Equal(t, http.StatusRequestEntityTooLarge, code)
	require.Equal(t, "too_large", er.Error.Code)
	code, er = b.post("/api/signin", []byte(`{"public_key":"x","extra":1}`), nil)
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, er.Error.Message, "extra")
}

// sse reads server-sent events from a stream.
type sse struct {
	r    *bufio.Reader
	body io.Closer
}

type sseEvent struct {
	id, event, data string
}

func (s *sse) next(t *testing.T) sseEvent {
	t.Helper()
	var ev sseEvent
	for {
		line, err := s.r.ReadString('\n')
		require.NoError(t, err)
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "":
			if ev.event != "" {
				return ev
			}
		case strings.HasPrefix(line, "id: "):
			ev.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			ev.event = line[7:]
		case strings.HasPrefix(line, "data: "):
			ev.data = line[6:]
		}
	}
}

func (b *browser) stream(t *testing.T, goalID, lastID string) *sse {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, b.url+"/api/goals/"+goalID+"/stream", nil)
	require.NoError(t, err)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	hc := *b.hc
	hc.Timeout = 0 // a stream lasts; the reads below end with the test's deadline
	resp, err := hc.Do(req)
	require.NoError(t, err)
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("stream: %d %s", resp.StatusCode, body)
	}
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	t.Cleanup(func() { resp.Body.Close() })
	return &sse{r: bufio.NewReader(resp.Body), body: resp.Body}
}

// waitGoal reads the stream until a "goal" snapshot satisfies ok, and
// returns it with its id.
func (s *sse) waitGoal(t *testing.T, ok func(*schemas.GoalView) bool) (string, []string) {
	t.Helper()
	var events []string
	deadline := time.AfterFunc(20*time.Second, func() { s.body.Close() })
	defer deadline.Stop()
	for {
		ev := s.next(t)
		switch ev.event {
		case "event":
			var fe struct {
				Type string `json:"type"`
			}
			require.NoError(t, json.Unmarshal([]byte(ev.data), &fe))
			events = append(events, fe.Type)
		case "goal":
			var snap struct {
				Seq  uint64            `json:"seq"`
				Goal *schemas.GoalView `json:"goal"`
			}
			require.NoError(t, json.Unmarshal([]byte(ev.data), &snap))
			require.NotEmpty(t, ev.id, "a snapshot names the log sequence it reflects")
			if ok(snap.Goal) {
				return ev.id, events
			}
		case "failure":
			t.Fatalf("the stream failed: %s", ev.data)
		}
	}
}

func nodeState(g *schemas.GoalView, key string) string {
	for _, n := range g.Nodes {
		if n.Key == key {
			return n.State
		}
	}
	return ""
}

// The goal's stream pushes its tasks' state changes as they are committed;
// a reconnection with Last-Event-ID is told the events it missed, then the
// goal as it stands.
func TestStreamPushesTaskStates(t *testing.T) {
	e := setup(t)
	g, err := e.admin.CreateGoal(ctx(t), schemas.CreateGoal{Title: "ship", Tasks: []schemas.TaskSpec{
		{Key: "build", Queue: "q"}, {Key: "deploy", Queue: "q", DependsOn: []string{"build"}}}})
	require.NoError(t, err)
	b := e.signedIn(t, e.member(t, "vera", roleViewer))

	s := b.stream(t, g.ID, "")
	first, _ := s.waitGoal(t, func(v *schemas.GoalView) bool { return nodeState(v, "build") == schemas.StateReady })
	build := ""
	for _, pt := range g.Tasks {
		if pt.Key == "build" {
			build = pt.TaskID
		}
	}
	_, err = e.admin.CancelTask(ctx(t), build, "changed my mind")
	require.NoError(t, err)
	_, events := s.waitGoal(t, func(v *schemas.GoalView) bool {
		return nodeState(v, "build") == schemas.StateCancelled && nodeState(v, "deploy") == schemas.StateFailed
	})
	require.Contains(t, events, "task.cancelled", "the events themselves are pushed too")

	again := b.stream(t, g.ID, first)
	_, missed := again.waitGoal(t, func(v *schemas.GoalView) bool { return v.State == schemas.GoalStateFailed })
	require.Contains(t, missed, "task.cancelled", "a resumed stream is told what it missed")

	// A stream ends when its session signs out.
	code, _ := b.post("/api/signout", nil, nil)
	require.Equal(t, http.StatusNoContent, code)
	for {
		if _, err := again.r.ReadString('\n'); err != nil {
			break
		}
	}
}

// A task's timeline carries its history with the hash chain checked: each
// event's prev is the SHA-256 of the one before, and the head is the last
// one's.
func TestTimelineShowsAVerifiedChain(t *testing.T) {
	e := setup(t)
	r, err := e.admin.CreateTask(ctx(t), schemas.TaskSpec{Queue: "q", Input: json.RawMessage(`{"n":1}`)})
	require.NoError(t, err)
	_, err = e.admin.CancelTask(ctx(t), r.ID, "done with it")
	require.NoError(t, err)
	b := e.signedIn(t, filepath.Join(e.svc.Dir, access.AdminCredsFile))
	var tl struct {
		Task    schemas.Task `json:"task"`
		History []struct {
			Type string `json:"type"`
			Hash string `json:"hash"`
			Prev string `json:"prev"`
		} `json:"history"`
		Chain struct {
			Verified bool   `json:"verified"`
			Events   int    `json:"events"`
			Head     string `json:"head"`
		} `json:"chain"`
	}
	code, _ := b.get("/api/tasks/"+r.ID, &tl)
	require.Equal(t, http.StatusOK, code)
	require.True(t, tl.Chain.Verified)
	require.GreaterOrEqual(t, tl.Chain.Events, 2)
	require.Equal(t, "task.cancelled", tl.History[len(tl.History)-1].Type)
	var last json.RawMessage
	for raw, err := range client.List[json.RawMessage](ctx(t), e.admin, "events", schemas.Query{ID: r.ID, Aggregate: "task"}) {
		require.NoError(t, err)
		last = *raw
	}
	sum := sha256.Sum256(last)
	require.Equal(t, hex.EncodeToString(sum[:]), tl.Chain.Head)
	for i := 1; i < len(tl.History); i++ {
		require.Equal(t, tl.History[i-1].Hash, tl.History[i].Prev)
	}

	code, _ = b.get("/api/tasks/01NOTATASK0000000000000000", nil)
	require.Equal(t, http.StatusNotFound, code)
}

// The queues page counts ready tasks (depth), running attempts, waiting
// tasks and quarantined items per queue.
func TestQueues(t *testing.T) {
	e := setup(t)
	for range 2 {
		_, err := e.admin.CreateTask(ctx(t), schemas.TaskSpec{Queue: "render"})
		require.NoError(t, err)
	}
	e.gatedTask(t, "alice") // queue payments, waiting for its approval

	// A poison item: delivered the most times its queue allows, never
	// acknowledged (an executor crashing on it), it is quarantined.
	_, err := e.admin.Command(ctx(t), "queue.configure", map[string]any{"queue": "poison", "lease_ms": 1000, "max_deliver": 1, "max_running": 3,
		"rate_limit": 600, "rate_period_ms": 60_000, "order": "priority"})
	require.NoError(t, err)
	bad, err := e.admin.CreateTask(ctx(t), schemas.TaskSpec{Queue: "poison"})
	require.NoError(t, err)
	js, err := jetstream.New(e.svc.Conn) // the service's own account: the work stream itself
	require.NoError(t, err)
	cons, err := js.Consumer(ctx(t), "DWR_WORK", "dwr-default-poison")
	require.NoError(t, err)
	servicetest.Eventually(t, 20*time.Second, func() bool {
		if batch, err := cons.Fetch(1, jetstream.FetchMaxWait(100*time.Millisecond)); err == nil {
			for range batch.Messages() { // taken, never acknowledged
			}
		}
		task, err := e.admin.Task(ctx(t), bad.ID)
		return err == nil && task.State == schemas.StateFailed && task.Reason == "quarantined"
	})
	b := e.signedIn(t, e.member(t, "vera", roleViewer))
	var qs []struct {
		Name          string     `json:"name"`
		Ready         int        `json:"ready"`
		Running       int        `json:"running"`
		Waiting       int        `json:"waiting"`
		Quarantined   int        `json:"quarantined"`
		MaxDeliver    int        `json:"max_deliver"`
		MaxRunning    int        `json:"max_running"`
		RateLimit     int        `json:"rate_limit"`
		RatePeriodMS  int64      `json:"rate_period_ms"`
		Order         string     `json:"order"`
		Polling       int        `json:"polling"`
		LastDelivered *time.Time `json:"last_delivered"`
	}
	code, _ := b.get("/api/queues", &qs)
	require.Equal(t, http.StatusOK, code)
	require.Len(t, qs, 3)
	require.Equal(t, "payments", qs[0].Name)
	require.Equal(t, 1, qs[0].Waiting)
	require.Equal(t, 0, qs[0].Ready)
	require.Equal(t, "poison", qs[1].Name)
	require.Equal(t, 1, qs[1].Quarantined)
	require.Equal(t, 1, qs[1].MaxDeliver)
	require.Equal(t, 3, qs[1].MaxRunning)
	require.Equal(t, [2]int64{600, 60_000}, [2]int64{int64(qs[1].RateLimit), qs[1].RatePeriodMS})
	require.Equal(t, "priority", qs[1].Order, "the queue's order, as configured")
	require.NotNil(t, qs[1].LastDelivered, "the poison item was delivered")
	require.Zero(t, qs[1].Polling, "no executor polls it")
	require.Equal(t, "render", qs[2].Name)
	require.Equal(t, 2, qs[2].Ready)
	require.Empty(t, qs[2].Order, "a queue never configured: fifo, left out")

	// A queue's page lists its tasks of a state; a failed task's page
	// retries it, for an identity that may (a viewer may not).
	var ts []schemas.Task
	code, _ = b.get("/api/queues/poison/tasks?state=failed", &ts)
	require.Equal(t, http.StatusOK, code)
	require.Len(t, ts, 1)
	require.Equal(t, [2]string{bad.ID, "quarantined"}, [2]string{ts[0].ID, ts[0].Reason})
	code, _ = b.get("/api/queues/render/tasks?state=ready", &ts)
	require.Equal(t, http.StatusOK, code)
	require.Len(t, ts, 2, "render's two ready tasks, and no other queue's")
	require.Greater(t, ts[0].ID, ts[1].ID, "the newest first")
	code, _ = b.get("/api/queues/render/tasks?state=failed", &ts)
	require.Equal(t, http.StatusOK, code)
	require.Empty(t, ts)
	code, er := b.get("/api/queues/render/tasks?state=done", nil)
	require.Equal(t, http.StatusBadRequest, code)
	require.Equal(t, schemas.CodeInvalid, er.Error.Code)

	code, er = b.post("/api/tasks/"+bad.ID+"/retry", map[string]string{"reason": "vera tries"}, nil)
	require.Equal(t, http.StatusForbidden, code)
	require.Equal(t, schemas.CodeForbidden, er.Error.Code)
	admin := e.signedIn(t, filepath.Join(e.svc.Dir, access.AdminCredsFile))
	var res schemas.CommandResult
	code, _ = admin.post("/api/tasks/"+bad.ID+"/retry", map[string]string{"reason": "the executor is fixed"}, &res)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, schemas.StateReady, res.State, "a new attempt")

	// An admin pauses a queue and resumes it (a viewer may not); the
	// listing and the queue's own entry say so.
	code, er = b.post("/api/queues/render/pause", nil, nil)
	require.Equal(t, http.StatusForbidden, code)
	require.Equal(t, schemas.CodeForbidden, er.Error.Code)
	code, _ = admin.post("/api/queues/render/pause", nil, &res)
	require.Equal(t, http.StatusOK, code)
	require.True(t, res.Paused)
	var q schemas.QueueConfig // the admin's session reads its own writes
	code, _ = admin.get("/api/queues/render", &q)
	require.Equal(t, http.StatusOK, code)
	require.True(t, q.Paused)
	var rows []struct {
		Name   string `json:"name"`
		Paused bool   `json:"paused"`
	}
	code, _ = admin.get("/api/queues", &rows)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "render", rows[2].Name)
	require.True(t, rows[2].Paused)
	var resumed schemas.CommandResult
	code, _ = admin.post("/api/queues/render/resume", nil, &resumed)
	require.Equal(t, http.StatusOK, code)
	require.False(t, resumed.Paused)
	q = schemas.QueueConfig{}
	code, _ = admin.get("/api/queues/render", &q)
	require.Equal(t, http.StatusOK, code)
	require.False(t, q.Paused)
}

// A goal's plan versions come from its history: each with its tasks, what
// its revision kept, added and removed, and who committed it.
func TestPlanRevisions(t *testing.T) {
	e := setup(t)
	g, err := e.admin.CreateGoal(ctx(t), schemas.CreateGoal{Title: "revised", SuccessCriteria: []string{"done"},
		Tasks: []schemas.TaskSpec{{Key: "a", Queue: "held"}, {Key: "b", Queue: "held", DependsOn: []string{"a"}}}})
	require.NoError(t, err)
	_, err = e.admin.SubmitPlan(ctx(t), g.ID, []schemas.TaskSpec{{Key: "a", Queue: "held"}, {Key: "c", Queue: "held", DependsOn: []string{"a"}}})
	require.NoError(t, err)

	b := e.signedIn(t, e.member(t, "vera", roleViewer))
	var revs []struct {
		Version int                `json:"version"`
		Actor   string             `json:"actor"`
		Tasks   []schemas.PlanTask `json:"tasks"`
		Kept    []string           `json:"kept"`
		Added   []string           `json:"added"`
		Removed []string           `json:"removed"`
	}
	servicetest.Eventually(t, 10*time.Second, func() bool { // the viewer's session reads views that may lag the admin's write
		revs = nil
		code, _ := b.get("/api/goals/"+g.ID+"/plans", &revs)
		return code == http.StatusOK && len(revs) == 2
	})
	require.Equal(t, 1, revs[0].Version)
	require.Equal(t, []string{"a", "b"}, []string{revs[0].Tasks[0].Key, revs[0].Tasks[1].Key})
	require.Equal(t, 2, revs[1].Version)
	require.Equal(t, []string{"a"}, revs[1].Kept)
	require.Equal(t, []string{"c"}, revs[1].Added)
	require.Equal(t, []string{"b"}, revs[1].Removed)
	require.NotEmpty(t, revs[1].Actor)
	require.Equal(t, revs[0].Tasks[0].TaskID, revs[1].Tasks[0].TaskID, "a kept task keeps its id")
}

// The schedules page lists the workspace's schedules; an admin pauses and
// resumes one (a viewer may not).
func TestSchedules(t *testing.T) {
	e := setup(t)
	_, err := e.admin.CreateSchedule(ctx(t), schemas.CreateSchedule{Name: "hourly", ScheduleSpec: schemas.ScheduleSpec{Every: schemas.Duration(time.Hour),
		Goal: json.RawMessage(`{"title": "hourly report", "success_criteria": ["sent"]}`), Tasks: json.RawMessage(`[{"key": "send", "queue": "held"}]`)}})
	require.NoError(t, err)
	b := e.signedIn(t, e.member(t, "vera", roleViewer))
	var ss []schemas.Schedule
	servicetest.Eventually(t, 10*time.Second, func() bool {
		ss = nil
		code, _ := b.get("/api/schedules", &ss)
		return code == http.StatusOK && len(ss) == 1
	})
	require.Equal(t, "hourly", ss[0].Name)
	require.NotNil(t, ss[0].NextSlot)
	require.False(t, ss[0].Paused)

	code, er := b.post("/api/schedules/hourly/pause", nil, nil)
	require.Equal(t, http.StatusForbidden, code)
	require.Equal(t, schemas.CodeForbidden, er.Error.Code)
	admin := e.signedIn(t, filepath.Join(e.svc.Dir, access.AdminCredsFile))
	code, _ = admin.post("/api/schedules/hourly/pause", nil, nil)
	require.Equal(t, http.StatusOK, code)
	ss = nil
	code, _ = admin.get("/api/schedules", &ss) // the admin's session reads its own writes
	require.Equal(t, http.StatusOK, code)
	require.True(t, ss[0].Paused)
	require.Nil(t, ss[0].NextSlot, "no slot while paused")
	code, _ = admin.post("/api/schedules/hourly/resume", nil, nil)
	require.Equal(t, http.StatusOK, code)
	ss = nil
	code, _ = admin.get("/api/schedules", &ss)
	require.Equal(t, http.StatusOK, code)
	require.False(t, ss[0].Paused)
	require.NotNil(t, ss[0].NextSlot)

	// A schedule's goals: none yet, though a goal made by hand stands.
	_, err = e.admin.CreateGoal(ctx(t), schemas.CreateGoal{Title: "by hand", SuccessCriteria: []string{"done"}})
	require.NoError(t, err)
	var gs []schemas.GoalView
	servicetest.Eventually(t, 10*time.Second, func() bool { // another client's write: once the views have it
		gs = nil
		code, _ := admin.get("/api/goals", &gs)
		return code == http.StatusOK && len(gs) == 1
	})
	gs = nil
	code, _ = admin.get("/api/goals?schedule=hourly", &gs)
	require.Equal(t, http.StatusOK, code)
	require.Empty(t, gs, "the goal made by hand is not the schedule's")
	code, er = admin.get("/api/goals?schedule=Not%20A%20Name", nil)
	require.Equal(t, http.StatusBadRequest, code)
	require.Equal(t, schemas.CodeInvalid, er.Error.Code)
}

// The page and its assets are served from the binary, with a policy that
// lets them load nothing from elsewhere.
func TestServesThePage(t *testing.T) {
	e := setup(t)
	for _, p := range []string{"/", "/assets/app.js", "/assets/canonical.js", "/assets/credential.js", "/assets/style.css"} {
		resp, err := http.Get(e.url + p)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, p)
		require.Contains(t, resp.Header.Get("Content-Security-Policy"), "default-src 'self'")
	}
}

var consoleAt = regexp.MustCompile(`console and metrics on (http://[^/ "]+)/`)

// dwr serve mounts the console at / of its HTTP server, and the console
// reaches the embedded server in-process as whoever signs in.
func TestServeMountsTheConsole(t *testing.T) {
	dir := t.TempDir()
	key, _, err := handlers.LoadLogKey(filepath.Join(dir, handlers.LogKeyFile), true)
	require.NoError(t, err)
	logs := &servicetest.Output{}
	cfg := handlers.ServeConfig{DataDir: dir, HTTP: "127.0.0.1:0", Embedded: handlers.EmbeddedConfig{Listen: ""},
		Console: func(n handlers.ConsoleNATS) http.Handler {
			c, err := console.New(console.Config{NATSURL: n.URL, NATSOptions: n.Options})
			require.NoError(t, err)
			return c
		}}
	cfg.Service.LogKey, cfg.Service.Logger = key, slog.New(slog.NewTextHandler(logs, nil))
	sctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- handlers.Serve(sctx, cfg) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()
	servicetest.Eventually(t, 20*time.Second, func() bool {
		return strings.Contains(logs.String(), "dwr ready") && consoleAt.MatchString(logs.String())
	}, logs.String)
	b := &browser{t: t, url: consoleAt.FindStringSubmatch(logs.String())[1], hc: &http.Client{Timeout: 30 * time.Second}}
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	b.hc.Jar = jar
	code, er := b.signIn(filepath.Join(dir, access.AdminCredsFile))
	require.Equal(t, http.StatusOK, code, er.Error.Message)
	var goals []schemas.GoalView
	code, er = b.get("/api/goals", &goals)
	require.Equal(t, http.StatusOK, code, er.Error.Message)
	require.Empty(t, goals)
}

// Sessions are bounded: past MaxSessions a sign-in is refused; one idle
// past IdleTimeout is ended (and makes room); closing the console ends the
// live streams.
func TestSessionsAreBoundedAndExpire(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	e := setup(t, func(c *console.Config) { c.MaxSessions, c.IdleTimeout, c.Now = 1, time.Minute, clock })
	g, err := e.admin.CreateGoal(ctx(t), schemas.CreateGoal{Title: "g", Tasks: []schemas.TaskSpec{{Key: "a", Queue: "q"}}})
	require.NoError(t, err)
	admin := filepath.Join(e.svc.Dir, access.AdminCredsFile)
	first, second := e.browser(t), e.browser(t)
	code, er := first.signIn(admin)
	require.Equal(t, http.StatusOK, code, er.Error.Message)
	code, er = second.signIn(admin)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, er.Error.Message, "1 sessions")

	mu.Lock()
	now = now.Add(2 * time.Minute)
	mu.Unlock()
	code, er = second.signIn(admin)
	require.Equal(t, http.StatusOK, code, "the idle session made room: %s", er.Error.Message)
	code, _ = first.get("/api/me", nil)
	require.Equal(t, http.StatusUnauthorized, code, "the idle session ended")

	s := second.stream(t, g.ID, "")
	s.waitGoal(t, func(*schemas.GoalView) bool { return true })
	require.NoError(t, e.con.Close())
	for {
		if _, err := s.r.ReadString('\n'); err != nil {
			break // the stream ended with the console
		}
	}
	code, _ = second.get("/api/me", nil)
	require.Equal(t, http.StatusUnauthorized, code, "closing the console ended its sessions")
}

// One client that starts sign-ins and never signs holds at most
// MaxPendingSignInsPerAddress of the console's slots: a sign-in from
// another address still goes through.
func TestPendingSignInsAreBoundedPerAddress(t *testing.T) {
	e := setup(t)
	admin := filepath.Join(e.svc.Dir, access.AdminCredsFile)
	data, err := os.ReadFile(admin)
	require.NoError(t, err)
	kp, err := nkeys.ParseDecoratedUserNKey(data)
	require.NoError(t, err)
	pub, err := kp.PublicKey()
	require.NoError(t, err)
	from := func(ip string) *browser { // a browser whose connections come from ip (a loopback address)
		b := e.browser(t)
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 10 * time.Second}
		b.hc.Transport = &http.Transport{DialContext: d.DialContext}
		return b
	}
	hog := from("127.0.0.1")
	start := map[string]string{"workspace": "default", "public_key": pub}
	for i := range console.MaxPendingSignInsPerAddress {
		code, er := hog.post("/api/signin", start, nil)
		require.Equal(t, http.StatusOK, code, "sign-in %d: %s", i, er.Error.Message)
	}
	code, er := hog.post("/api/signin", start, nil)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, er.Error.Message, "from your address")

	code, er = from("127.0.0.2").signIn(admin)
	require.Equal(t, http.StatusOK, code, "another address signs in: %s", er.Error.Message)
}

// The goals page shows the newest goals, newest first — with more goals
// than a page holds, the newest MaxListed, not the oldest.
func TestGoalsPageShowsTheNewest(t *testing.T) {
	e := setup(t)
	var made []string
	for i := range console.MaxListed + 2 {
		r, err := e.admin.CreateGoal(ctx(t), schemas.CreateGoal{Title: fmt.Sprintf("goal %d", i)})
		require.NoError(t, err)
		made = append(made, r.ID)
	}
	b := e.signedIn(t, filepath.Join(e.svc.Dir, access.AdminCredsFile))
	var goals []schemas.GoalView
	code, _ := b.get("/api/goals", &goals)
	require.Equal(t, http.StatusOK, code)
	require.Len(t, goals, console.MaxListed)
	require.Equal(t, made[len(made)-1], goals[0].ID, "the newest first")
	require.Equal(t, made[2], goals[len(goals)-1].ID, "the two oldest are left out")
}

// The goals page lists the goals holding every label asked for (label=
// NAME=VALUE, repeatable, with the schedule filter too); a goal's labels
// are set and removed through POST /api/goals/{id}/labels, by an identity
// that may (a viewer may not). A filter that is not NAME=VALUE, and a label
// that is not a label, are refused, naming what is wrong.
func TestGoalLabels(t *testing.T) {
	e := setup(t)
	create := func(title string, labels schemas.Labels) string {
		t.Helper()
		r, err := e.admin.CreateGoal(ctx(t), schemas.CreateGoal{Title: title, Labels: labels})
		require.NoError(t, err)
		return r.ID
	}
	acmeGold := create("acme gold", schemas.Labels{"customer": "acme", "tier": "gold"})
	acme := create("acme", schemas.Labels{"customer": "acme"})
	globex := create("globex", schemas.Labels{"customer": "globex", "note": "a=b"})
	create("unlabeled", nil)
	admin := e.signedIn(t, filepath.Join(e.svc.Dir, access.AdminCredsFile))
	list := func(b *browser, query string) []string {
		t.Helper()
		var gs []schemas.GoalView
		code, er := b.get("/api/goals?"+query, &gs)
		require.Equal(t, http.StatusOK, code, "%s: %s", query, er.Error.Message)
		ids := []string{}
		for _, g := range gs {
			ids = append(ids, g.ID)
		}
		return ids
	}
	servicetest.Eventually(t, 10*time.Second, func() bool { // another client's writes: once the views have them
		return len(list(admin, "")) == 4
	})
	require.Equal(t, []string{acme, acmeGold}, list(admin, "label=customer=acme"), "newest first")
	require.Equal(t, []string{acme, acmeGold}, list(admin, "label=customer%3Dacme"), "the '=' escaped, as a page may send it")
	require.Equal(t, []string{acmeGold}, list(admin, "label=customer=acme&label=tier=gold"), "every label must match")
	require.Equal(t, []string{acmeGold}, list(admin, "label=tier=gold&label=customer=acme&label=tier=gold"))
	require.Equal(t, []string{globex}, list(admin, "label=note=a%3Db"), "a value may hold '='")
	require.Empty(t, list(admin, "label=customer=acm"), "a value is matched whole")
	require.Empty(t, list(admin, "label=customer=acme&schedule=hourly"), "with the schedule filter: none of them is the schedule's")

	// Malformed filters are the console's to refuse; a name that is not a
	// name, the service's: each says what is wrong.
	for _, c := range []struct{ query, says string }{
		{"label=customer", `label filter "customer" is not NAME=VALUE`},
		{"label=customer=acme&label=customer=globex", `label "customer" is filtered by two values`},
		{"label=Customer=acme", "/labels/Customer"},
	} {
		code, er := admin.get("/api/goals?"+c.query, nil)
		require.Equal(t, http.StatusBadRequest, code, c.query)
		require.Equal(t, schemas.CodeInvalid, er.Error.Code, c.query)
		require.NotEmpty(t, er.Error.Fields, c.query)
		require.Contains(t, er.Error.Message+" "+er.Error.Fields[0].Pointer, c.says, c.query)
	}

	// Set and removed, the labels are the goal's at once for the session
	// that changed them, and the listing follows.
	path := "/api/goals/" + globex + "/labels"
	labelsOf := func(id string) schemas.Labels {
		t.Helper()
		var g schemas.GoalView
		code, er := admin.get("/api/goals/"+id, &g)
		require.Equal(t, http.StatusOK, code, er.Error.Message)
		return g.Labels
	}
	var res schemas.CommandResult
	code, er := admin.post(path, map[string]any{"set": map[string]string{"customer": "acme", "urgent": ""}, "remove": []string{"note"}}, &res)
	require.Equal(t, http.StatusOK, code, er.Error.Message)
	require.False(t, res.Duplicate)
	require.Equal(t, schemas.Labels{"customer": "acme", "urgent": ""}, labelsOf(globex))
	require.Equal(t, []string{globex, acme, acmeGold}, list(admin, "label=customer=acme"))
	require.Equal(t, []string{globex}, list(admin, "label=urgent="), "an empty value is a value")
	code, er = admin.post(path, map[string]any{"remove": []string{"urgent"}}, &res)
	require.Equal(t, http.StatusOK, code, er.Error.Message)
	require.Equal(t, schemas.Labels{"customer": "acme"}, labelsOf(globex))
	res = schemas.CommandResult{}
	code, er = admin.post(path, map[string]any{"remove": []string{"absent"}}, &res)
	require.Equal(t, http.StatusOK, code, er.Error.Message)
	require.True(t, res.Duplicate, "nothing to change")

	// Refused: a name that is not a name (the field named), a body that is
	// not the request, another site's post, a viewer's. Nothing changes.
	code, er = admin.post(path, map[string]any{"set": map[string]string{"Customer": "initech"}}, nil)
	require.Equal(t, http.StatusBadRequest, code)
	require.Equal(t, schemas.CodeInvalid, er.Error.Code)
	require.NotEmpty(t, er.Error.Fields, er.Error.Message)
	require.Equal(t, "/set/Customer", er.Error.Fields[0].Pointer, er.Error.Message)
	code, er = admin.post(path, map[string]any{"labels": map[string]string{"customer": "initech"}}, nil)
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, er.Error.Message, "labels")
	code, er = admin.postWith(path, map[string]any{"set": map[string]string{"customer": "initech"}}, nil, map[string]string{"Origin": e.url})
	require.Equal(t, http.StatusForbidden, code)
	require.Equal(t, "csrf", er.Error.Code)
	vera := e.signedIn(t, e.member(t, "vera", roleViewer))
	servicetest.Eventually(t, 10*time.Second, func() bool { // a viewer reads the listing, once its views have the change
		return slices.Equal([]string{globex, acme, acmeGold}, list(vera, "label=customer=acme"))
	})
	code, er = vera.post(path, map[string]any{"set": map[string]string{"customer": "initech"}}, nil)
	require.Equal(t, http.StatusForbidden, code)
	require.Equal(t, schemas.CodeForbidden, er.Error.Code)
	g, err := e.admin.Goal(ctx(t), globex)
	require.NoError(t, err)
	require.Equal(t, schemas.Labels{"customer": "acme"}, g.Labels, "nothing changed")
}

// POST /api/tasks/{id}/labels sets and removes a task's labels (task.label),
// and a refused name is named.
func TestTaskLabelsFromTheConsole(t *testing.T) {
	e := setup(t)
	tk, err := e.admin.CreateTaskWith(ctx(t), schemas.CreateTask{Spec: schemas.TaskSpec{Queue: "mail"}, Labels: schemas.Labels{"customer": "acme"}})
	require.NoError(t, err)
	admin := e.signedIn(t, filepath.Join(e.svc.Dir, access.AdminCredsFile))
	code, er := admin.post("/api/tasks/"+tk.ID+"/labels", map[string]any{"set": map[string]any{"stage": "sent"}, "remove": []string{"customer"}}, nil)
	require.Equal(t, http.StatusOK, code, er.Error.Message)
	var tl struct {
		Task schemas.Task `json:"task"`
	}
	code, _ = admin.get("/api/tasks/"+tk.ID, &tl)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, schemas.Labels{"stage": "sent"}, tl.Task.Labels)
	code, er = admin.post("/api/tasks/"+tk.ID+"/labels", map[string]any{"set": map[string]any{"Stage": "x"}}, nil)
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, er.Error.Message, "/set/Stage")
}

// POST /api/goals/{id}/priority sets a goal's priority (goal.prioritize):
// the goal shows it at once for the session that set it, the same priority
// again is a duplicate, and one out of 1..5 is refused, the field named.
func TestGoalPriorityFromTheConsole(t *testing.T) {
	e := setup(t)
	r, err := e.admin.CreateGoal(ctx(t), schemas.CreateGoal{Title: "triage"})
	require.NoError(t, err)
	admin := e.signedIn(t, filepath.Join(e.svc.Dir, access.AdminCredsFile))
	path := "/api/goals/" + r.ID + "/priority"
	priorityOf := func() int {
		t.Helper()
		var g schemas.GoalView
		code, er := admin.get("/api/goals/"+r.ID, &g)
		require.Equal(t, http.StatusOK, code, er.Error.Message)
		return g.Priority
	}
	servicetest.Eventually(t, 10*time.Second, func() bool { // another client's write: once the views have it
		code, _ := admin.get("/api/goals/"+r.ID, nil)
		return code == http.StatusOK
	})
	require.Zero(t, priorityOf(), "none given: none shown (the page shows 3)")

	var res schemas.CommandResult
	code, er := admin.post(path, map[string]any{"priority": 1}, &res)
	require.Equal(t, http.StatusOK, code, er.Error.Message)
	require.False(t, res.Duplicate)
	require.Equal(t, 1, priorityOf())
	g, err := e.admin.Goal(ctx(t), r.ID)
	require.NoError(t, err)
	require.Equal(t, 1, g.Priority, "goal.get has it")
	res = schemas.CommandResult{}
	code, er = admin.post(path, map[string]any{"priority": 1}, &res)
	require.Equal(t, http.StatusOK, code, er.Error.Message)
	require.True(t, res.Duplicate, "the same priority again")

	// Refused: a priority out of 1..5 (the field named), a body that is not
	// the request, a viewer's. Nothing changes.
	code, er = admin.post(path, map[string]any{"priority": 9}, nil)
	require.Equal(t, http.StatusBadRequest, code)
	require.Equal(t, schemas.CodeInvalid, er.Error.Code)
	require.NotEmpty(t, er.Error.Fields, er.Error.Message)
	require.Equal(t, "/priority", er.Error.Fields[0].Pointer, er.Error.Message)
	code, er = admin.post(path, map[string]any{"prio": 2}, nil)
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, er.Error.Message, "prio")
	vera := e.signedIn(t, e.member(t, "vera", roleViewer))
	code, er = vera.post(path, map[string]any{"priority": 5}, nil)
	require.Equal(t, http.StatusForbidden, code)
	require.Equal(t, schemas.CodeForbidden, er.Error.Code)
	require.Equal(t, 1, priorityOf(), "nothing changed")
}

// GET /api/goal-by-key/{key} answers the goal made last with the key
// (goal.create's key), as GET /api/goals/{id} does; a key no goal was made
// with is 404.
func TestGoalByKeyFromTheConsole(t *testing.T) {
	e := setup(t)
	r, err := e.admin.CreateGoal(ctx(t), schemas.CreateGoal{Title: "order 1042", Key: "order-1042"})
	require.NoError(t, err)
	admin := e.signedIn(t, filepath.Join(e.svc.Dir, access.AdminCredsFile))
	var g schemas.GoalView
	servicetest.Eventually(t, 10*time.Second, func() bool { // another client's write: once the views have it
		code, _ := admin.get("/api/goal-by-key/order-1042", &g)
		return code == http.StatusOK
	})
	require.Equal(t, r.ID, g.ID)
	require.Equal(t, "order-1042", g.Key)
	require.Equal(t, "order 1042", g.Title)
	var byID schemas.GoalView
	code, er := admin.get("/api/goals/"+r.ID, &byID)
	require.Equal(t, http.StatusOK, code, er.Error.Message)
	require.Equal(t, "order-1042", byID.Key, "the goal's page has its key")

	code, er = admin.get("/api/goal-by-key/order-9", nil)
	require.Equal(t, http.StatusNotFound, code)
	require.Equal(t, schemas.CodeNotFound, er.Error.Code)
}

// GET /api/tasks lists the tasks holding every label asked for (label=
// NAME=VALUE, repeatable, read as the goals' listing reads it; state=S
// too), newest first, each with what the tasks page shows; a filter that is
// not NAME=VALUE, and a label that is not a label, are refused, naming what
// is wrong.
func TestTasksByLabel(t *testing.T) {
	e := setup(t)
	create := func(key string, labels schemas.Labels) string {
		t.Helper()
		r, err := e.admin.CreateTaskWith(ctx(t), schemas.CreateTask{Spec: schemas.TaskSpec{Queue: "mail", Key: key}, Labels: labels})
		require.NoError(t, err)
		return r.ID
	}
	acme := create("invoice-1", schemas.Labels{"customer": "acme"})
	initech := create("", schemas.Labels{"customer": "initech"})
	admin := e.signedIn(t, filepath.Join(e.svc.Dir, access.AdminCredsFile))
	type row struct {
		ID        string         `json:"id"`
		Key       string         `json:"key"`
		State     string         `json:"state"`
		Queue     string         `json:"queue"`
		GoalID    string         `json:"goal_id"`
		Labels    schemas.Labels `json:"labels"`
		UpdatedAt time.Time      `json:"updated_at"`
	}
	list := func(query string) []row {
		t.Helper()
		var rows []row
		code, er := admin.get("/api/tasks?"+query, &rows)
		require.Equal(t, http.StatusOK, code, "%s: %s", query, er.Error.Message)
		return rows
	}
	ids := func(rows []row) []string {
		out := []string{}
		for _, r := range rows {
			out = append(out, r.ID)
		}
		return out
	}
	servicetest.Eventually(t, 10*time.Second, func() bool { // another client's writes: once the views have them
		return len(list("label=customer=initech")) == 1
	})
	rows := list("label=customer=acme")
	require.Equal(t, []string{acme}, ids(rows), "only the task labeled customer=acme")
	tk, err := e.admin.Task(ctx(t), acme)
	require.NoError(t, err)
	got := rows[0]
	require.Equal(t, row{ID: acme, Key: "invoice-1", State: tk.State, Queue: "mail", Labels: schemas.Labels{"customer": "acme"}}, row{ID: got.ID, Key: got.Key, State: got.State, Queue: got.Queue, GoalID: got.GoalID, Labels: got.Labels})
	require.False(t, got.UpdatedAt.IsZero(), "the time it last changed")
	require.Equal(t, []string{initech}, ids(list("label=customer%3Dinitech")), "the '=' escaped, as a page may send it")
	require.Equal(t, []string{acme}, ids(list("label=customer=acme&state="+tk.State)), "with the state filter")
	require.Empty(t, list("label=customer=acme&state=cancelled"))
	require.Empty(t, list("label=customer=acm"), "a value is matched whole")
	newer := create("", schemas.Labels{"customer": "acme", "tier": "gold"})
	servicetest.Eventually(t, 10*time.Second, func() bool {
		return len(list("label=customer=acme")) == 2
	})
	require.Equal(t, []string{newer, acme}, ids(list("label=customer=acme")), "newest first")
	require.Equal(t, []string{newer}, ids(list("label=tier=gold&label=customer=acme")), "every label must match")

	for _, c := range []struct{ query, says string }{
		{"label=customer", `label filter "customer" is not NAME=VALUE`},
		{"label=customer=acme&label=customer=initech", `label "customer" is filtered by two values`},
		{"label=Customer=acme", "/labels/Customer"},
		{"label=customer=acme&state=asleep", `state "asleep"`},
	} {
		code, er := admin.get("/api/tasks?"+c.query, nil)
		require.Equal(t, http.StatusBadRequest, code, c.query)
		require.Equal(t, schemas.CodeInvalid, er.Error.Code, c.query)
		require.NotEmpty(t, er.Error.Fields, c.query)
		require.Contains(t, er.Error.Message+" "+er.Error.Fields[0].Pointer, c.says, c.query)
	}
}
