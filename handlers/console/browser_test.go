package console_test

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/executors"
	"github.com/dwr-run/dwr/handlers/access"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/schemas"
)

// chromium returns the path of the Chromium binary the browser test drives.
// Without one it skips the test, unless CI is set: CI installs it
// (.ci/run), and there the test must run.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"/usr/bin/chromium", "chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("the browser test needs Chromium, and CI is set: install it (apt-get install -y chromium; .ci/run does)")
	}
	t.Skip("Chromium is not installed (apt-get install chromium): the browser test is skipped; in CI it runs")
	return ""
}

// screenshot saves the page as DIR/name.png when DWR_SCREENSHOTS=DIR.
func screenshot(t *testing.T, name string) chromedp.Action[chromedp.Void] {
	dir := os.Getenv("DWR_SCREENSHOTS")
	return chromedp.Func(func(ctx context.Context, target *chromedp.Target) error {
		if dir == "" {
			return nil
		}
		png, err := chromedp.CaptureScreenshot()(ctx, target)
		if err != nil {
			return err
		}
		t.Logf("screenshot %s.png (%d bytes)", name, len(png))
		return os.WriteFile(filepath.Join(dir, name+".png"), png, 0o600) //nolint:gosec // G703: the directory the developer named
	})
}

// do runs the steps in order, each with a deadline of its own; when one
// fails it logs where the page was and what it showed, and fails the test.
func do(t *testing.T, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) error {
	t.Helper()
	for i, step := range steps {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := chromedp.Run(sctx, step)
		cancel()
		if err != nil {
			where, _ := chromedp.Run(ctx, chromedp.Location())
			text, _ := chromedp.Run(ctx, chromedp.Evaluate[string]("document.body.innerText"))
			return fmt.Errorf("step %d: %w\nat %s, the page showed:\n%s", i+1, err, where, text)
		}
	}
	return nil
}

// startBrowser starts headless Chromium (exe), 1280×800, ended with the
// test.
func startBrowser(t *testing.T, exe string) context.Context {
	t.Helper()
	actx, cancel := chromedp.NewExecAllocator(context.Background(), chromedp.ExecPath(exe),
		chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun, chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 800))
	t.Cleanup(cancel)
	bctx, cancel := chromedp.NewContext(actx, chromedp.WithErrorf(t.Logf))
	t.Cleanup(cancel)
	require.NoError(t, chromedp.Do(bctx, chromedp.EmulateViewport(1280, 800)), "start the browser") // without a deadline, which would stop it
	return bctx
}

// textOf reads the text of the element sel finds into into, in one
// evaluation: an element the goal's live stream draws anew between
// finding it and reading it (as chromedp.Text does, in two) is no
// error.
func textOf(sel string, into *string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, target *chromedp.Target) (err error) {
		q, err := json.Marshal(sel)
		if err != nil {
			return err
		}
		*into, err = chromedp.Evaluate[string](`document.querySelector(`+string(q)+`).innerText`)(ctx, target)
		return err
	})
}

// signIn signs in on the sign-in form with the credential file creds.
func signIn(creds string) chromedp.Action[chromedp.Void] {
	return chromedp.Steps(
		chromedp.WaitVisible(chromedp.CSS("#creds")),
		chromedp.SetUploadFiles(chromedp.CSS("#creds"), []string{creds}),
		chromedp.Click(chromedp.CSS("#signin")),
		chromedp.WaitVisible(chromedp.CSS("#signout")),
	)
}

// A person runs the console in a real browser: signs in as the admin with
// the credential file, watches a plan's graph turn green as SDK workers run
// its tasks (pushed over server-sent events), opens a task's timeline with
// its verified chain and the queues; then signs in as an approver and
// decides an approval, signing with their key file in the page. The
// decision is in the log, by that approver, with a signature the key
// verifies.
func TestBrowser(t *testing.T) {
	exe := chromium(t)
	e := setup(t)

	// The approver: a member who may decide (role approver), registered
	// with a key for role ops, and the key file dwr keys create writes.
	alice := e.member(t, "alice", roleApprover)
	key, err := executors.NewSigningKey("alice", "default")
	require.NoError(t, err)
	_, err = e.admin.RegisterApprover(ctx(t), schemas.RegisterApprover{Name: "alice", Role: "ops",
		PublicKey: base64.StdEncoding.EncodeToString(key.Public())})
	require.NoError(t, err)
	pemKey, err := key.PEM()
	require.NoError(t, err)
	keyFile := filepath.Join(t.TempDir(), "alice.key")
	require.NoError(t, os.WriteFile(keyFile, pemKey, 0o600))

	// Workers of the SDK run the plan's tasks.
	runner := e.svc.Member(t, "default", "runner", "executor", "build")
	w, err := executors.NewWorker(executors.Config{Conn: runner, Queue: "build", Executor: "runner-1", Concurrency: 2},
		func(_ context.Context, j *executors.Job) (executors.Result, error) {
			return executors.Result{Output: map[string]any{"built": j.Key}}, nil
		})
	require.NoError(t, err)
	wctx, stopWorker := context.WithCancel(context.Background())
	workerDone := make(chan error, 1)
	go func() { workerDone <- w.Run(wctx) }()
	t.Cleanup(func() {
		stopWorker()
		if err := <-workerDone; err != nil {
			t.Logf("the worker stopped: %v", err)
		}
	})

	// A refund that waits for a person's approval.
	refund, err := e.admin.CreateTask(ctx(t), schemas.TaskSpec{Queue: "payments", Title: "refund order 7 (120.50 EUR)",
		Input:    json.RawMessage(`{"order":"o-7","refund":120.50,"currency":"EUR"}`),
		Approval: &schemas.ApprovalSpec{Role: "ops", Basis: json.RawMessage(`{"policy":"refunds over 100 EUR need ops","ticket":"T-42"}`)}})
	require.NoError(t, err)
	approvalID := refund.ID + "-1"

	bctx := startBrowser(t, exe)
	admin := filepath.Join(e.svc.Dir, access.AdminCredsFile)
	require.NoError(t, do(t, bctx, chromedp.Navigate(e.url+"/"), signIn(admin)))

	// The plan: three tasks, build after fetch and test, as a client submits it.
	g, err := e.admin.CreateGoal(ctx(t), schemas.CreateGoal{Title: "release 1.4", SuccessCriteria: []string{"1.4 is built"},
		Labels:   schemas.Labels{"team": "platform", "release": "1.4"},
		Envelope: schemas.Envelope{Budget: schemas.Budget{Attempts: 10, Cost: 2.5}},
		Tasks: []schemas.TaskSpec{{Key: "fetch", Queue: "build"}, {Key: "test", Queue: "build", DependsOn: []string{"fetch"}},
			{Key: "package", Queue: "build", DependsOn: []string{"fetch", "test"}}}})
	require.NoError(t, err)
	node := func(key, state string) string {
		return fmt.Sprintf(`g.node[data-task-key=%q][data-task-state=%q]`, key, state)
	}
	// A goal revised once: a added first with b, then kept, with c instead of b.
	revised, err := e.admin.CreateGoal(ctx(t), schemas.CreateGoal{Title: "revised plan", SuccessCriteria: []string{"done"}, Labels: schemas.Labels{"team": "platform"},
		Tasks: []schemas.TaskSpec{{Key: "a", Queue: "held"}, {Key: "b", Queue: "held", DependsOn: []string{"a"}}}})
	require.NoError(t, err)
	_, err = e.admin.SubmitPlan(ctx(t), revised.ID, []schemas.TaskSpec{{Key: "a", Queue: "held"}, {Key: "c", Queue: "held", DependsOn: []string{"a"}}})
	require.NoError(t, err)
	_, err = e.admin.CreateSchedule(ctx(t), schemas.CreateSchedule{Name: "nightly", ScheduleSpec: schemas.ScheduleSpec{Cron: "0 3 * * *", TimeZone: "Europe/Paris",
		Goal: json.RawMessage(`{"title": "nightly build", "success_criteria": ["built"]}`), Tasks: json.RawMessage(`[{"key": "build", "queue": "held"}]`)}})
	require.NoError(t, err)
	// A goal a third done, on one attempt of a budget of 2: three at this rate.
	projected, err := e.admin.CreateGoal(ctx(t), schemas.CreateGoal{Title: "projected", SuccessCriteria: []string{"done"}, Labels: schemas.Labels{"team": "billing"},
		Envelope: schemas.Envelope{Budget: schemas.Budget{Attempts: 2}},
		Tasks:    []schemas.TaskSpec{{Key: "ship", Queue: "build"}, {Key: "h1", Queue: "held"}, {Key: "h2", Queue: "held"}}})
	require.NoError(t, err)
	var stuck []string // three tasks of a queue no executor takes, cancelled at once from its page
	for range 3 {
		r, err := e.admin.CreateTask(ctx(t), schemas.TaskSpec{Queue: "stuck"})
		require.NoError(t, err)
		stuck = append(stuck, r.ID)
	}
	var noButtons bool  // an accepted task can be neither cancelled nor retried
	var noPriority bool // a task that gives no priority: its page shows none
	var attemptsSpent, costBound, revisedProgress, paymentsRate, paymentsOrder, buildOrder string
	require.NoError(t, do(t, bctx,
		chromedp.Navigate(e.url+"/#/goals"),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`tr[data-goal-id=%q] a`, g.ID))),
		screenshot(t, "goals"),
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`tr[data-goal-id=%q] a`, g.ID))),
		chromedp.WaitVisible(chromedp.CSS("#graph")),
		chromedp.WaitVisible(chromedp.CSS(node("fetch", "accepted"))),
		chromedp.WaitVisible(chromedp.CSS(node("test", "accepted"))),
		chromedp.WaitVisible(chromedp.CSS(node("package", "accepted"))),
		chromedp.WaitVisible(chromedp.CSS(`[data-goal-state="achieved"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#budget tr[data-budget="attempts"][data-over="false"] meter`)),
		chromedp.WaitNotVisible(chromedp.CSS("#cancel-goal")), // an achieved goal is not offered for cancelling
		textOf(`#budget tr[data-budget="attempts"] td.num`, &attemptsSpent),
		textOf(`#budget tr[data-budget="cost"] td:nth-of-type(2)`, &costBound),
		screenshot(t, "plan-graph"),
		chromedp.Click(chromedp.CSS(`g.node[data-task-key="test"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#chain[data-verified="true"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#attempts tr[data-attempt="1"]`)),
		screenshot(t, "task-timeline"),
		chromedp.Func(func(ctx context.Context, target *chromedp.Target) (err error) {
			noButtons, err = chromedp.Evaluate[bool](`document.querySelector("#cancel-task") === null && document.querySelector("#retry-task") === null`)(ctx, target)
			return err
		}),
		chromedp.Func(func(ctx context.Context, target *chromedp.Target) (err error) {
			noPriority, err = chromedp.Evaluate[bool](`document.querySelector("#task-priority") === null`)(ctx, target)
			return err
		}),
		// The revised goal: its latest plan marks c added; the slider shows
		// the first version, with b, which the revision removed.
		chromedp.Navigate(e.url+"/#/goals/"+revised.ID),
		chromedp.WaitVisible(chromedp.CSS(`#plan-version`)),
		chromedp.WaitVisible(chromedp.CSS(`g.node[data-task-key="c"][data-revision="added"]`)),
		textOf(`#goal-progress`, &revisedProgress),
		screenshot(t, "plan-revision"),
		chromedp.Func(func(ctx context.Context, target *chromedp.Target) error {
			_, err := chromedp.Evaluate[bool](`const s = document.querySelector("#plan-version"); s.value = "1"; s.dispatchEvent(new Event("input")); true`)(ctx, target)
			return err
		}),
		chromedp.WaitVisible(chromedp.CSS(`g.node[data-task-key="b"][data-task-state="retired"]`)),
		chromedp.WaitVisible(chromedp.CSS(`g.node[data-task-key="a"][data-revision="added"]`)),
		// Revised again while its page is open: the third version joins the
		// slider, shown as the live plan.
		chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
			_, err := e.admin.SubmitPlan(ctx, revised.ID, []schemas.TaskSpec{{Key: "a", Queue: "held"},
				{Key: "c", Queue: "held", DependsOn: []string{"a"}}, {Key: "d", Queue: "held", DependsOn: []string{"a"}}})
			return err
		}),
		chromedp.WaitVisible(chromedp.CSS(`#plan-version[max="3"]`)),
		chromedp.WaitVisible(chromedp.CSS(`g.node[data-task-key="d"][data-revision="added"]`)),
		chromedp.Navigate(e.url+"/#/goals/"+projected.ID),
		chromedp.WaitVisible(chromedp.CSS(`#budget tr[data-budget="attempts"][data-over="false"] td.bad[data-projected="3"]`)),
		chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
			_, err := e.admin.Command(ctx, "queue.configure", map[string]any{"queue": "payments", "lease_ms": 30_000, "max_deliver": 5,
				"rate_limit": 60, "rate_period_ms": 60_000, "order": "priority"})
			return err
		}),
		chromedp.Click(chromedp.CSS(`a[data-nav="queues"]`)),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-queue="payments"]`)), // the refund waits for its approval
		textOf(`tr[data-queue="payments"] td.rate`, &paymentsRate),
		textOf(`tr[data-queue="payments"] td.order`, &paymentsOrder),
		textOf(`tr[data-queue="build"] td.order`, &buildOrder),
		screenshot(t, "queues"),
		chromedp.Click(chromedp.CSS(`tr[data-queue="build"] a`)), // a queue's tasks, of a state
		chromedp.WaitVisible(chromedp.CSS("#queue-task-state")),
		chromedp.Navigate(e.url+"/#/queues/build?state=accepted"),
		chromedp.WaitVisible(chromedp.CSS(`#queue-tasks tr[data-task-id] a`)),
		screenshot(t, "queue-tasks"),
		chromedp.Func(func(ctx context.Context, target *chromedp.Target) error {
			_, err := chromedp.Evaluate[bool](`window.confirm = () => true; true`)(ctx, target) // the pause asks first
			return err
		}),
		chromedp.Click(chromedp.CSS("#pause-queue")),
		chromedp.WaitVisible(chromedp.CSS("#queue-paused")),
		screenshot(t, "queue-paused"),
		chromedp.Click(chromedp.CSS("#resume-queue")),
		chromedp.WaitVisible(chromedp.CSS("#pause-queue")),
		// The schedules: one paused and resumed from its row.
		chromedp.Click(chromedp.CSS(`a[data-nav="schedules"]`)),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-schedule="nightly"][data-paused="false"] time`)), // its next slot
		chromedp.Click(chromedp.CSS(`tr[data-schedule="nightly"] button[data-toggle="pause"]`)),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-schedule="nightly"][data-paused="true"]`)),
		screenshot(t, "schedules"),
		chromedp.Click(chromedp.CSS(`tr[data-schedule="nightly"] button[data-toggle="resume"]`)),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-schedule="nightly"][data-paused="false"]`)),
		// A queue's ready tasks, cancelled together.
		chromedp.Navigate(e.url+"/#/queues/stuck?state=ready"),
		chromedp.WaitVisible(chromedp.CSS(`#bulk-cancel`)),
		chromedp.Func(func(ctx context.Context, target *chromedp.Target) error {
			_, err := chromedp.Evaluate[bool](`window.confirm = () => true; true`)(ctx, target)
			return err
		}),
		chromedp.Click(chromedp.CSS(`#bulk-cancel`)),
		chromedp.WaitVisible(chromedp.CSS(`#bulk-progress[data-done="all"]`)),
		chromedp.Click(chromedp.CSS("#signout")),
	))
	require.True(t, noButtons, "an accepted task's page offers no cancel and no retry")
	require.True(t, noPriority, "a task that gives no priority: its page shows none")
	for _, id := range stuck { // the console's commands, read by another client: once its views have them
		servicetest.Eventually(t, 10*time.Second, func() bool {
			tk, err := e.admin.Task(ctx(t), id)
			return err == nil && tk.State == schemas.StateCancelled
		})
	}
	require.Equal(t, "3", attemptsSpent, "three tasks, an attempt each, beside the budget of 10")
	require.Equal(t, "of 2.5", costBound)
	require.Equal(t, "0/2", revisedProgress, "of the plan's two tasks: b, removed, counts no more")
	require.Equal(t, "60 per minute", paymentsRate, "the queue's rate limit, as people say it")
	require.Equal(t, "priority", paymentsOrder, "the queue's order, as configured")
	require.Equal(t, "fifo", buildOrder, "a queue whose order was never set")

	// The approver signs in, opens the approval and approves with their key.
	require.NoError(t, do(t, bctx,
		signIn(alice),
		chromedp.WaitVisible(chromedp.CSS(`#main [data-error-code="forbidden"]`)), // an approver may not read goals: the service says so
		chromedp.Click(chromedp.CSS(`a[data-nav="approvals"]`)),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`tr[data-approval-id=%q] a`, approvalID))),
		screenshot(t, "approvals-inbox"),
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`tr[data-approval-id=%q] a`, approvalID))),
		chromedp.WaitVisible(chromedp.CSS(`#digest-check[data-ok="true"]`)),
	))
	shown, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS("#digest")))
	require.NoError(t, err)
	require.NoError(t, do(t, bctx,
		chromedp.SetUploadFiles(chromedp.CSS("#keyfile"), []string{keyFile}),
		chromedp.SendKeys(chromedp.CSS("#comment"), "refund checked against T-42"),
		chromedp.Click(chromedp.CSS(`button[data-response="approve"]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-decided="approve"]`)),
		screenshot(t, "approval-decide"),
	))

	a := e.waitApproval(t, approvalID, schemas.ApprovalStateDecided)
	require.Equal(t, a.ActionDigest, shown, "the page showed the digest it signed")
	require.Equal(t, "alice", a.Decision.Approver)
	require.Equal(t, "approve", a.Decision.Response)
	require.Equal(t, "refund checked against T-42", a.Decision.Comment)
	require.Equal(t, executors.KeyID(key.Public()), a.Decision.KeyID)
	sig, err := base64.StdEncoding.DecodeString(a.Decision.Signature)
	require.NoError(t, err)
	require.True(t, ed25519.Verify(key.Public(), executors.DecisionMessage(a.ID, "approve", a.ActionDigest), sig),
		"the signature the browser made verifies with the approver's key")
}

// A person finds goals by their labels and labels a goal, in a real
// browser: a label's chip in the goals list filters the list by it, a
// "name=value" typed into the filter narrows it further and its chip's ×
// widens it again, a filter that is not name=value is refused with the
// console's reason; on a goal's page they set a label (a new one, then a
// new value), see the service refuse a name that is not a name, remove a
// label with its ×, and see a label set elsewhere arrive live. A goal made
// with a key shows it on its page, and the goals list's "Go to key" box
// goes there by the key (one no goal has is said so in place). The tasks
// page lists the tasks by their labels the same way: typed into its
// filter, a chip of a task's clicked; a task's page links its labels to
// that list.
func TestBrowserLabels(t *testing.T) {
	exe := chromium(t)
	e := setup(t)
	create := func(title, key string, labels schemas.Labels) string {
		t.Helper()
		r, err := e.admin.CreateGoal(ctx(t), schemas.CreateGoal{Title: title, SuccessCriteria: []string{"paid"}, Labels: labels, Key: key,
			Tasks: []schemas.TaskSpec{{Key: "bill", Queue: "held"}, {Key: "send", Queue: "held", DependsOn: []string{"bill"}}}})
		require.NoError(t, err)
		return r.ID
	}
	gold := create("invoice 1041", "", schemas.Labels{"customer": "acme", "tier": "gold"})
	acme := create("invoice 1042", "order-1042", schemas.Labels{"customer": "acme", "order": "1042"})
	globex := create("invoice 1043", "", schemas.Labels{"customer": "globex"})
	plain := create("quarterly report", "", nil)
	task, err := e.admin.CreateTaskWith(ctx(t), schemas.CreateTask{Spec: schemas.TaskSpec{Queue: "held", Priority: 1}, Labels: schemas.Labels{"customer": "acme"}})
	require.NoError(t, err)
	gold2, err := e.admin.CreateTaskWith(ctx(t), schemas.CreateTask{Spec: schemas.TaskSpec{Queue: "held", Key: "ship-7"}, Labels: schemas.Labels{"customer": "initech", "tier": "gold"}})
	require.NoError(t, err)
	admin := filepath.Join(e.svc.Dir, access.AdminCredsFile)
	api := e.signedIn(t, admin)
	servicetest.Eventually(t, 10*time.Second, func() bool { // another client's writes: once the console's reads have them
		var gs []schemas.GoalView
		code, _ := api.get("/api/goals", &gs)
		if code != http.StatusOK || len(gs) != 4 {
			return false
		}
		var ts []struct{}
		code, _ = api.get("/api/tasks?label=tier=gold", &ts)
		return code == http.StatusOK && len(ts) == 1
	})

	bctx := startBrowser(t, exe)
	listed := func(into *[]string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, target *chromedp.Target) (err error) {
			*into, err = chromedp.Evaluate[[]string](`[...document.querySelectorAll("#goals tbody tr")].map((r) => r.dataset.goalId)`)(ctx, target)
			return err
		})
	}
	chip := func(goalID, label string) string {
		return fmt.Sprintf(`#goals tr[data-goal-id=%q] a.chip[data-label=%q]`, goalID, label)
	}
	var all, byCustomer, byTier, widened []string
	var refused, spentText string
	var spentUnfiltered bool
	require.NoError(t, do(t, bctx,
		chromedp.Navigate(e.url+"/"), signIn(admin),
		chromedp.Navigate(e.url+"/#/goals"),
		chromedp.WaitVisible(chromedp.CSS(chip(gold, "tier=gold"))),
		listed(&all),
		chromedp.Func(func(ctx context.Context, target *chromedp.Target) (err error) {
			spentUnfiltered, err = chromedp.Evaluate[bool](`document.querySelector("#spent-together") !== null`)(ctx, target)
			return err
		}),
		chromedp.Click(chromedp.CSS(chip(acme, "customer=acme"))),
		chromedp.WaitVisible(chromedp.CSS(`#goal-filters .chip[data-filter="customer=acme"]`)),
		listed(&byCustomer),
		textOf("#spent-together", &spentText),
		chromedp.SendKeys(chromedp.CSS("#label-filter"), "tier=gold\r"),
		chromedp.WaitVisible(chromedp.CSS(`#goal-filters .chip[data-filter="tier=gold"]`)),
		listed(&byTier),
		screenshot(t, "goals-by-label"),
		chromedp.Click(chromedp.CSS(`#goal-filters a[data-remove-filter="customer=acme"]`)),
		chromedp.WaitNotPresent(chromedp.CSS(`#goal-filters .chip[data-filter="customer=acme"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#goal-filters .chip[data-filter="tier=gold"]`)),
		listed(&widened),
		chromedp.SendKeys(chromedp.CSS("#label-filter"), "customer\r"),
		chromedp.WaitVisible(chromedp.CSS(`#main [data-error-code="invalid"]`)),
		textOf(`#main [data-error-code="invalid"]`, &refused),
	))
	require.ElementsMatch(t, []string{gold, acme, globex, plain}, all)
	require.Equal(t, []string{acme, gold}, byCustomer, "the goals labeled customer=acme, newest first")
	require.False(t, spentUnfiltered, "every goal: no sum")
	require.Equal(t, "Spent by these 2 goals: 0 attempts · 0 tokens · cost 0 · 0 ms", spentText, "what a customer's goals spent together")
	require.Equal(t, []string{gold}, byTier, "labeled customer=acme and tier=gold")
	require.Equal(t, []string{gold}, widened, "only tier=gold: the one goal so labeled")
	require.Contains(t, refused, `label filter "customer" is not NAME=VALUE`)

	// The "Go to key" box: a key no goal has is said so in place; the
	// keyed goal's key lands on its page, which shows the key. A goal
	// without one shows none.
	var noKey, keyShown, landedAt string
	var unkeyedShowsKey bool
	require.NoError(t, do(t, bctx,
		chromedp.Navigate(e.url+"/#/goals"),
		chromedp.WaitVisible(chromedp.CSS(chip(gold, "tier=gold"))),
		chromedp.SendKeys(chromedp.CSS("#goal-key-input"), "order-9\r"),
		chromedp.WaitVisible(chromedp.CSS(`#no-goal-with-key`)),
		textOf(`#no-goal-with-key`, &noKey),
		chromedp.Func(func(ctx context.Context, target *chromedp.Target) error { // emptied, as a person corrects it
			_, err := chromedp.Evaluate[bool](`document.querySelector("#goal-key-input").value = ""; true`)(ctx, target)
			return err
		}),
		chromedp.SendKeys(chromedp.CSS("#goal-key-input"), "order-1042"),
		chromedp.Click(chromedp.CSS("#go-to-key")),
		chromedp.WaitVisible(chromedp.CSS(`#goal-head #goal-key`)),
		textOf(`#goal-head`, &keyShown),
		chromedp.Func(func(ctx context.Context, target *chromedp.Target) (err error) {
			landedAt, err = chromedp.Location()(ctx, target)
			return err
		}),
		screenshot(t, "goal-key"),
		chromedp.Navigate(e.url+"/#/goals/"+gold),
		chromedp.WaitVisible(chromedp.CSS(`#goal-labels .chip[data-label="tier=gold"]`)),
		chromedp.Func(func(ctx context.Context, target *chromedp.Target) (err error) {
			unkeyedShowsKey, err = chromedp.Evaluate[bool](`document.querySelector("#goal-key") !== null`)(ctx, target)
			return err
		}),
	))
	require.Equal(t, "no goal with key order-9", noKey)
	require.Equal(t, e.url+"/#/goals/"+acme, landedAt, "the goal made with the key")
	require.Contains(t, keyShown, "invoice 1042")
	require.Contains(t, keyShown, "key order-1042", "the goal's page shows its key")
	require.False(t, unkeyedShowsKey, "a goal without a key shows none")

	// The tasks page: nothing listed until a label is asked for; typed
	// in, only the task holding it; a chip of a listed task narrows the
	// list by it; a task's id opens its page, whose label chips link back
	// to the list.
	tasksListed := func(into *[]string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, target *chromedp.Target) (err error) {
			*into, err = chromedp.Evaluate[[]string](`[...document.querySelectorAll("#tasks tbody tr")].map((r) => r.dataset.taskId)`)(ctx, target)
			return err
		})
	}
	taskRow := func(id string) string { return fmt.Sprintf(`#tasks tr[data-task-id=%q]`, id) }
	var noTasks, acmeRow, backAt string
	var byAcme, byGold, narrowed, backToList []string
	require.NoError(t, do(t, bctx,
		chromedp.Navigate(e.url+"/#/goals"),
		chromedp.WaitVisible(chromedp.CSS(chip(gold, "tier=gold"))),
		chromedp.Click(chromedp.CSS(`#nav a[data-nav="tasks"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#no-tasks`)),
		textOf(`#no-tasks`, &noTasks),
		chromedp.SendKeys(chromedp.CSS("#label-filter"), "customer=acme\r"),
		chromedp.WaitVisible(chromedp.CSS(`#task-filters .chip[data-filter="customer=acme"]`)),
		chromedp.WaitVisible(chromedp.CSS(taskRow(task.ID))),
		tasksListed(&byAcme),
		textOf(taskRow(task.ID), &acmeRow),
		screenshot(t, "tasks-by-label"),
		chromedp.Navigate(e.url+"/#/tasks?label=tier=gold"),
		chromedp.WaitVisible(chromedp.CSS(`#task-filters .chip[data-filter="tier=gold"]`)),
		chromedp.WaitVisible(chromedp.CSS(taskRow(gold2.ID))),
		tasksListed(&byGold),
		chromedp.Click(chromedp.CSS(taskRow(gold2.ID)+` a.chip[data-label="customer=initech"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#task-filters .chip[data-filter="customer=initech"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#task-filters .chip[data-filter="tier=gold"]`)),
		chromedp.WaitVisible(chromedp.CSS(taskRow(gold2.ID)+` a.chip.on[data-label="customer=initech"]`)),
		tasksListed(&narrowed),
		chromedp.Click(chromedp.CSS(taskRow(gold2.ID)+` a[href="#/tasks/`+gold2.ID+`"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#task-labels .chip[data-label="customer=initech"]`)),
		chromedp.Click(chromedp.CSS(`#task-labels .chip[data-label="customer=initech"] a`)),
		chromedp.WaitVisible(chromedp.CSS(`#task-filters .chip[data-filter="customer=initech"]`)),
		chromedp.WaitVisible(chromedp.CSS(taskRow(gold2.ID))),
		tasksListed(&backToList),
		chromedp.Func(func(ctx context.Context, target *chromedp.Target) (err error) {
			backAt, err = chromedp.Location()(ctx, target)
			return err
		}),
	))
	require.Contains(t, noTasks, "name=value", "the empty tasks page says how to ask")
	require.Equal(t, []string{task.ID}, byAcme, "exactly the task labeled customer=acme")
	require.Contains(t, acmeRow, "held")
	require.Contains(t, acmeRow, "customer=acme")
	require.Equal(t, []string{gold2.ID}, byGold)
	require.Equal(t, []string{gold2.ID}, narrowed, "labeled tier=gold and customer=initech")
	require.Equal(t, e.url+"/#/tasks?label=customer=initech", backAt, "a task's label links to the tasks holding it")
	require.Equal(t, []string{gold2.ID}, backToList)

	var badName, nameLeft, taskPriority, priorityBefore, priorityAfter, badPriority, priorityLeft string
	require.NoError(t, do(t, bctx,
		chromedp.Navigate(e.url+"/#/goals/"+acme),
		chromedp.WaitVisible(chromedp.CSS(`#goal-labels .chip[data-label="customer=acme"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#goal-labels .chip[data-label="order=1042"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#live.ok`)), // the live stream is open
		// A new label, then a new value of one it holds.
		chromedp.SendKeys(chromedp.CSS("#label-name"), "priority"),
		chromedp.SendKeys(chromedp.CSS("#label-value"), "high"),
		chromedp.Click(chromedp.CSS("#set-label")),
		chromedp.WaitVisible(chromedp.CSS(`#goal-labels .chip[data-label="priority=high"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#set-label:enabled`)), // the form is done with it (the stream may show the label first)
		chromedp.SendKeys(chromedp.CSS("#label-name"), "customer"),
		chromedp.SendKeys(chromedp.CSS("#label-value"), "initech"),
		chromedp.Click(chromedp.CSS("#set-label")),
		chromedp.WaitVisible(chromedp.CSS(`#goal-labels .chip[data-label="customer=initech"]`)),
		chromedp.WaitNotPresent(chromedp.CSS(`#goal-labels .chip[data-label="customer=acme"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#set-label:enabled`)),
		screenshot(t, "goal-labels"),
		// The service refuses a name that is not a name, naming it.
		chromedp.SendKeys(chromedp.CSS("#label-name"), "Priority"),
		chromedp.SendKeys(chromedp.CSS("#label-value"), "low"),
		chromedp.Click(chromedp.CSS("#set-label")),
		chromedp.WaitVisible(chromedp.CSS(`#labels-msg [data-error-code="invalid"]`)),
		textOf(`#labels-msg [data-error-code="invalid"]`, &badName),
		chromedp.Func(func(ctx context.Context, target *chromedp.Target) (err error) {
			nameLeft, err = chromedp.Value(chromedp.CSS("#label-name"))(ctx, target) // left to be corrected
			return err
		}),
		// Removed with its ×.
		chromedp.Click(chromedp.CSS(`#goal-labels button[data-remove-label="priority"]`)),
		chromedp.WaitNotPresent(chromedp.CSS(`#goal-labels .chip[data-label="priority=high"]`)),
		chromedp.WaitNotPresent(chromedp.CSS(`#labels-msg [data-error-code]`)),
		// A label set to the value it has changes nothing, and the page
		// says so.
		chromedp.Func(func(ctx context.Context, target *chromedp.Target) error { // emptied, as a person corrects it
			_, err := chromedp.Evaluate[bool](`for (const s of ["#label-name", "#label-value"]) document.querySelector(s).value = ""; true`)(ctx, target)
			return err
		}),
		chromedp.SendKeys(chromedp.CSS("#label-name"), "order"),
		chromedp.SendKeys(chromedp.CSS("#label-value"), "1042"),
		chromedp.Click(chromedp.CSS("#set-label")),
		chromedp.WaitVisible(chromedp.CSS(`#labels-unchanged`)),
		// Set elsewhere, a label arrives on the open page over its stream.
		chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
			_, err := e.admin.LabelGoal(ctx, acme, schemas.Labels{"reviewed": "yes"}, nil)
			return err
		}),
		chromedp.WaitVisible(chromedp.CSS(`#goal-labels .chip[data-label="reviewed=yes"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#goal-labels .chip[data-label="customer=initech"]`)),
		// Its priority, none given: 3; set to 1 with the select and Set,
		// then 1 again, which changes nothing.
		textOf(`#goal-priority`, &priorityBefore),
		chromedp.SetValue(chromedp.CSS("#priority-select"), "1"),
		chromedp.Click(chromedp.CSS("#set-priority")),
		chromedp.WaitVisible(chromedp.CSS(`#goal-priority[data-priority="1"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#set-priority:enabled`)),
		textOf(`#goal-priority`, &priorityAfter),
		chromedp.Click(chromedp.CSS("#set-priority")),
		chromedp.WaitVisible(chromedp.CSS(`#priority-unchanged`)),
		chromedp.WaitVisible(chromedp.CSS(`#set-priority:enabled`)),
		// A priority the service refuses (a page altered to offer 9): the
		// refusal in place, the priority shown as it was.
		chromedp.Func(func(ctx context.Context, target *chromedp.Target) error {
			_, err := chromedp.Evaluate[bool](`document.querySelector("#priority-select").append(new Option("9", "9")); true`)(ctx, target)
			return err
		}),
		chromedp.SetValue(chromedp.CSS("#priority-select"), "9"),
		chromedp.Click(chromedp.CSS("#set-priority")),
		chromedp.WaitVisible(chromedp.CSS(`#priority-msg [data-error-code="invalid"]`)),
		textOf(`#priority-msg [data-error-code="invalid"]`, &badPriority),
		textOf(`#goal-priority`, &priorityLeft),
		// A task's page: its priority, and its labels, one set and one removed.
		chromedp.Navigate(e.url+"/#/tasks/"+task.ID),
		chromedp.WaitVisible(chromedp.CSS(`#task-labels .chip[data-label="customer=acme"]`)),
		textOf(`#task-priority`, &taskPriority),
		chromedp.SendKeys(chromedp.CSS("#label-name"), "stage"),
		chromedp.SendKeys(chromedp.CSS("#label-value"), "sent"),
		chromedp.Click(chromedp.CSS("#set-label")),
		chromedp.WaitVisible(chromedp.CSS(`#task-labels .chip[data-label="stage=sent"]`)),
		chromedp.Click(chromedp.CSS(`#task-labels button[data-remove-label="customer"]`)),
		chromedp.WaitNotPresent(chromedp.CSS(`#task-labels .chip[data-label="customer=acme"]`)),
	))
	require.Equal(t, "Priority 1", taskPriority, "the task's priority, from its spec")
	require.Equal(t, "Priority 3", priorityBefore, "a goal that gives no priority: 3")
	require.Equal(t, "Priority 1", priorityAfter, "the goal's priority, as set on its page")
	require.Contains(t, badPriority, "/priority", "the refusal names the field: %s", badPriority)
	require.Equal(t, "Priority 1", priorityLeft, "a refused priority changes nothing")
	require.Contains(t, badName, "/set/Priority", "the refusal names the field: %s", badName)
	tl, err := e.admin.Task(ctx(t), task.ID)
	require.NoError(t, err)
	require.Equal(t, schemas.Labels{"stage": "sent"}, tl.Labels, "the task's labels, as the console left them")
	require.Equal(t, "Priority", nameLeft, "a refused label stays in the form")
	servicetest.Eventually(t, 10*time.Second, func() bool { // the console's commands, read by another client
		g, err := e.admin.Goal(ctx(t), acme)
		return err == nil && maps.Equal(g.Labels, schemas.Labels{"customer": "initech", "order": "1042", "reviewed": "yes"}) && g.Priority == 1
	})
}
