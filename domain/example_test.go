package domain_test

import (
	"fmt"
	"time"

	"github.com/dwr-run/dwr/domain"
)

// Example runs a plan of two tasks, fetch -> summarize, through Execute. Each
// command is decided against the committed world at a given time; its
// changes, reactions included, are then applied to the world, as the writer
// does after appending them to the log.
func Example() {
	world := domain.NewOverlay(domain.Empty{})
	now := time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC)
	names := map[string]string{}
	n := 0
	run := func(cmd domain.Command) *domain.Outcome {
		n++
		m := domain.Meta{CommandID: fmt.Sprintf("cmd-%d", n), Workspace: "acme", Actor: "example", Now: now}
		out, err := domain.Execute(world, cmd, m)
		if err != nil {
			fmt.Println(cmd.CommandName(), "refused:", domain.CodeOf(err))
			return nil
		}
		fmt.Println(cmd.CommandName())
		for _, c := range out.Changes {
			if err := world.Apply(c, domain.Recorded{CommandID: m.CommandID, Actor: m.Actor, Time: now}); err != nil {
				panic(err)
			}
			if pc, ok := c.Event.(*domain.PlanCommitted); ok {
				for _, pt := range pc.Tasks {
					names[pt.TaskID] = pt.Key
				}
			}
			name := names[c.AggregateID]
			if name == "" {
				name = c.AggregateID
			}
			fmt.Printf("  %s %s v%d %s\n", c.AggregateType, name, c.Version, c.Event.EventType())
		}
		return out
	}

	run(&domain.CreateWorkspace{Name: "acme"})
	goalID := domain.DeriveID(now, "example goal")
	names[goalID] = "report"
	run(&domain.CreateGoal{GoalID: goalID, Title: "Weekly report"})

	out := run(&domain.SubmitPlan{GoalID: goalID, Tasks: []domain.TaskSpec{
		{Key: "fetch", Queue: "http"},
		{Key: "summarize", Queue: "llm", DependsOn: []string{"fetch"}},
	}})
	ids := map[string]string{}
	for _, pt := range out.Reply.Tasks {
		ids[pt.Key] = pt.TaskID
	}

	// An executor claims fetch and its first attempt fails: a retry is
	// scheduled. The service hands each claimer a secret token and the
	// domain only its hash; every later command of the attempt carries the
	// token.
	claim := run(&domain.ClaimTask{ClaimBody: domain.ClaimBody{TaskID: ids["fetch"], Executor: "http-worker"}, TokenHash: domain.TokenHash("token-1")})
	run(&domain.ReportFailure{TaskID: ids["fetch"], Attempt: claim.Reply.Attempt, Token: "token-1", Retryable: true,
		Error: domain.ErrorInfo{Code: "unavailable", Message: "503 from upstream"}})
	// The backoff timer may not fire early ...
	run(&domain.FireTimer{TaskID: ids["fetch"], Kind: domain.TimerBackoff})
	now = now.Add(time.Second)
	run(&domain.FireTimer{TaskID: ids["fetch"], Kind: domain.TimerBackoff})

	// ... and the second attempt succeeds, which makes summarize ready. A
	// report without the attempt's token is refused.
	claim = run(&domain.ClaimTask{ClaimBody: domain.ClaimBody{TaskID: ids["fetch"], Executor: "http-worker"}, TokenHash: domain.TokenHash("token-2")})
	run(&domain.ReportSuccess{TaskID: ids["fetch"], Attempt: claim.Reply.Attempt, Token: "guessed"})
	run(&domain.ReportSuccess{TaskID: ids["fetch"], Attempt: claim.Reply.Attempt, Token: "token-2"})
	claim = run(&domain.ClaimTask{ClaimBody: domain.ClaimBody{TaskID: ids["summarize"], Executor: "llm-worker"}, TokenHash: domain.TokenHash("token-3")})
	// The summary is accepted and, in the same outcome, the goal is achieved.
	run(&domain.ReportSuccess{TaskID: ids["summarize"], Attempt: claim.Reply.Attempt, Token: "token-3"})

	g, _ := world.Goal(goalID)
	fmt.Println("goal:", g.State)

	// Output:
	// workspace.create
	//   workspace acme v1 workspace.created
	// goal.create
	//   goal report v1 goal.created
	// plan.submit
	//   goal report v2 goal.plan_committed
	//   task fetch v1 task.created
	//   task summarize v1 task.created
	// task.claim
	//   task fetch v2 task.attempt_started
	// task.fail
	//   task fetch v3 task.attempt_failed
	//   task fetch v4 task.backoff_scheduled
	// timer.fire refused: conflict
	// timer.fire
	//   task fetch v5 task.ready
	// task.claim
	//   task fetch v6 task.attempt_started
	// task.succeed refused: forbidden
	// task.succeed
	//   task fetch v7 task.attempt_succeeded
	//   task fetch v8 task.accepted
	//   task summarize v2 task.ready
	// task.claim
	//   task summarize v3 task.attempt_started
	// task.succeed
	//   task summarize v4 task.attempt_succeeded
	//   task summarize v5 task.accepted
	//   goal report v3 goal.achieved
	// goal: achieved
}
