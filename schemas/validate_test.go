package schemas_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/schemas"
)

const (
	goalID = "01JWQYPRT84TFF59TDWH9EDD1R"
	taskID = "01JWTD0Q80H4QX4FR84G98PBSK"
)

func fieldMap(e *schemas.Error) map[string]string {
	m := map[string]string{}
	for _, f := range e.Fields {
		m[f.Pointer] = f.Message
	}
	return m
}

// TestTheEmbeddedSchemasCompile: what dwr serve compiles while it starts
// compiles, and validation then uses it.
func TestTheEmbeddedSchemasCompile(t *testing.T) {
	require.NoError(t, schemas.Compile())
	require.NoError(t, schemas.ValidateCommand("goal.create", []byte(`{"title":"t","envelope":{}}`)))
}

func TestValidateCommandReportsEveryField(t *testing.T) {
	body := `{
		"goal_id": "01jwqyprt84tff59tdwh9edd1r",
		"tasks": [
			{"key": "collect", "queue": "Web Research", "timeout": "ten minutes"},
			{"key": "draft", "queu": "writer", "depends_on": ["collect"], "retry": {"max_attempts": 5000, "multiplier": 0.5}},
			{"title": "` + strings.Repeat("t", 201) + `", "queue": "publisher", "approval": {"responses": ["maybe"]}, "start_at": "tomorrow"}
		],
		"priority": 3
	}`
	e := requireError(t, schemas.ValidateCommand("plan.submit", []byte(body)), schemas.CodeInvalid)
	got := fieldMap(e)
	want := []string{
		"/goal_id",
		"/priority",
		"/tasks/0/queue",
		"/tasks/0/timeout",
		"/tasks/1/queu",
		"/tasks/1/queue",
		"/tasks/1/retry/max_attempts",
		"/tasks/1/retry/multiplier",
		"/tasks/2/approval/responses/0",
		"/tasks/2/key",
		"/tasks/2/start_at",
		"/tasks/2/title",
	}
	var pointers []string
	for _, f := range e.Fields {
		pointers = append(pointers, f.Pointer)
	}
	require.Equal(t, want, pointers, "every offending field, in order")

	require.Contains(t, got["/goal_id"], "must be a ULID")
	require.Contains(t, got["/goal_id"], `"01jwqyprt84tff59tdwh9edd1r"`)
	require.Contains(t, got["/priority"], "is not a known field")
	require.Contains(t, got["/tasks/0/queue"], "must be a name of 1-63 lower-case letters")
	require.Contains(t, got["/tasks/0/timeout"], `must be a duration such as "30s"`)
	require.Contains(t, got["/tasks/1/queu"], `did you mean "queue"?`)
	require.Equal(t, "is required", got["/tasks/1/queue"])
	require.Equal(t, "must be at most 1000 (got 5000)", got["/tasks/1/retry/max_attempts"])
	require.Contains(t, got["/tasks/1/retry/multiplier"], "between 1 and 100")
	require.Contains(t, got["/tasks/2/approval/responses/0"], `must be one of "approve", "reject", "revise", "escalate"`)
	require.Equal(t, "is required", got["/tasks/2/key"])
	require.Contains(t, got["/tasks/2/start_at"], "must be an RFC 3339 time")
	require.Equal(t, "is 201 characters long; at most 200 are allowed", got["/tasks/2/title"])

	require.Contains(t, e.Message, "the plan.submit command is invalid: /goal_id: must be a ULID")
	require.Contains(t, e.Message, "and 9 more")
	for _, f := range e.Fields {
		require.NotContains(t, f.Message, "^", "%s: a message shows a regular expression: %s", f.Pointer, f.Message)
		require.NotContains(t, f.Message, "jsonschema", f.Pointer)
	}
}

// goal.create's first plan is checked field by field as plan.submit's is.
func TestValidateGoalCreateWithItsPlan(t *testing.T) {
	require.NoError(t, schemas.ValidateCommand("goal.create", []byte(
		`{"title":"chain","tasks":[{"key":"a","queue":"q"},{"key":"b","queue":"q","depends_on":["a"]}]}`)))
	body := `{"title":"chain","tasks":[{"key":"a","queue":"Web Research"},{"queue":"q"}]}`
	e := requireError(t, schemas.ValidateCommand("goal.create", []byte(body)), schemas.CodeInvalid)
	got := fieldMap(e)
	require.Contains(t, got["/tasks/0/queue"], "must be a name of 1-63 lower-case letters")
	require.Equal(t, "is required", got["/tasks/1/key"])
	e = requireError(t, schemas.ValidateCommand("goal.create", []byte(`{"title":"chain","tasks":[]}`)), schemas.CodeInvalid)
	require.Contains(t, fieldMap(e), "/tasks", "an empty plan is refused: leave tasks out for a goal without one")
}

// token is an attempt token as a claim returns it.
const token = "KhiymZYPFrFU6oy_5dRGFXrvyIw7zxqAVT7FeMpRSQU" //nolint:gosec // a token shape for the schema, not a secret

func TestValidateAttemptCommandsNeedAToken(t *testing.T) {
	for _, name := range []string{"task.checkpoint", "task.succeed", "task.fail", "task.wait", "task.request_approval", "task.heartbeat"} {
		body := []byte(`{"task_id":"` + taskID + `","attempt":1}`)
		e := requireError(t, schemas.ValidateCommand(name, body), schemas.CodeInvalid)
		require.Equal(t, "is required", fieldMap(e)["/token"], name)
		for _, bad := range []string{"", "short", token + "A", strings.Replace(token, "_", "/", 1), strings.Replace(token, "K", "=", 1)} {
			body := []byte(`{"task_id":"` + taskID + `","attempt":1,"token":"` + bad + `"}`)
			e := requireError(t, schemas.ValidateCommand(name, body), schemas.CodeInvalid)
			require.Contains(t, fieldMap(e)["/token"], "must be an attempt token", "%s %q", name, bad)
		}
	}
	require.NoError(t, schemas.ValidateCommand("task.heartbeat", []byte(`{"task_id":"`+taskID+`","attempt":1,"token":"`+token+`"}`)))
}

func TestValidateCommandConditionalFields(t *testing.T) {
	e := requireError(t, schemas.ValidateCommand("task.wait", []byte(`{"task_id":"`+taskID+`","attempt":1,"token":"`+token+`","kind":"signal"}`)), schemas.CodeInvalid)
	require.Equal(t, map[string]string{"/signal": "is required"}, fieldMap(e))
	e = requireError(t, schemas.ValidateCommand("task.wait", []byte(`{"task_id":"`+taskID+`","attempt":1,"token":"`+token+`","kind":"timer"}`)), schemas.CodeInvalid)
	require.Equal(t, map[string]string{"/until": "is required"}, fieldMap(e))
	e = requireError(t, schemas.ValidateCommand("timer.fire", []byte(`{"task_id":"`+taskID+`","kind":"attempt_timeout","due":"2025-06-03T10:22:40Z"}`)), schemas.CodeInvalid)
	require.Equal(t, map[string]string{"/attempt": "is required"}, fieldMap(e))
	require.NoError(t, schemas.ValidateCommand("timer.fire", []byte(`{"task_id":"`+taskID+`","kind":"backoff","due":"2025-06-03T10:22:40Z"}`)))
}

func TestValidateCommandValues(t *testing.T) {
	claim := func(field string) string {
		return `{"task_id":"` + taskID + `","executor":"x",` + field + `}`
	}
	spec := func(field string) string {
		return `{"task_id":"` + taskID + `","spec":{"queue":"q",` + field + `}}`
	}
	ok := []string{
		spec(`"timeout":"1m30s"`), spec(`"timeout":90`), spec(`"timeout":0.5`), spec(`"timeout":"0"`),
		spec(`"timeout":"250ms"`), spec(`"timeout":"1µs"`), spec(`"timeout":"1.5h"`),
		spec(`"start_at":"2025-06-01T12:00:00Z"`), spec(`"start_at":"2025-06-01T14:00:00.123456789+02:00"`),
		spec(`"retry":{"multiplier":0}`), spec(`"retry":{"multiplier":1}`), spec(`"retry":{"multiplier":100}`),
		spec(`"input":{"any":["json",1,null,true,{"x":{}}]}`), spec(`"input":null`),
		spec(`"title":"` + strings.Repeat("é", 200) + `"`),
		spec(`"depends_on":["` + goalID + `"]`),
		claim(`"supersedes":0`), claim(`"supersedes":2`),
	}
	for _, body := range ok {
		require.NoError(t, schemas.ValidateCommand(pick(body), []byte(body)), body)
	}
	bad := map[string]string{
		spec(`"timeout":"-1s"`):                            "/spec/timeout",
		spec(`"timeout":"1d"`):                             "/spec/timeout",
		spec(`"timeout":""`):                               "/spec/timeout",
		spec(`"timeout":-1`):                               "/spec/timeout",
		spec(`"timeout":true`):                             "/spec/timeout",
		spec(`"start_at":"2025-06-01t12:00:00z"`):          "/spec/start_at",
		spec(`"start_at":"2025-02-30T12:00:00Z"`):          "/spec/start_at",
		spec(`"start_at":"2025-06-01T12:00:00"`):           "/spec/start_at",
		spec(`"retry":{"multiplier":0.5}`):                 "/spec/retry/multiplier",
		spec(`"retry":{"multiplier":101}`):                 "/spec/retry/multiplier",
		spec(`"retry":{"max_attempts":-1}`):                "/spec/retry/max_attempts",
		spec(`"retry":{"max_attempts":1.5}`):               "/spec/retry/max_attempts",
		spec(`"title":"` + strings.Repeat("é", 201) + `"`): "/spec/title",
		spec(`"depends_on":["collect"]`):                   "/spec/depends_on/0",
		spec(`"key":"-starts-with-a-dash"`):                "/spec/key",
		spec(`"verification":{}`):                          "/spec/verification/queue",
		claim(`"supersedes":-1`):                           "/supersedes",
		claim(`"executor_version":5`):                      "/executor_version",
	}
	for body, ptr := range bad {
		e := requireError(t, schemas.ValidateCommand(pick(body), []byte(body)), schemas.CodeInvalid)
		require.Contains(t, fieldMap(e), ptr, "%s: %v", body, e)
	}
	ids := map[string]bool{
		"01JWQYPRT84TFF59TDWH9EDD1R":  true,
		"7ZZZZZZZZZZZZZZZZZZZZZZZZZ":  true,
		"8ZZZZZZZZZZZZZZZZZZZZZZZZZ":  false, // overflows 48 bits of time
		"01JWQYPRT84TFF59TDWH9EDD1":   false,
		"01JWQYPRT84TFF59TDWH9EDD1RR": false,
		"01JWQYPRT84TFF59TDWH9EDDIR":  false, // I is not Crockford
		"01jwqyprt84tff59tdwh9edd1r":  false,
	}
	for id, valid := range ids {
		err := schemas.ValidateCommand("task.cancel", []byte(`{"task_id":"`+id+`"}`))
		if valid {
			require.NoError(t, err, id)
		} else {
			requireCode(t, err, schemas.CodeInvalid)
		}
	}
	// An empty workspace name means the one in the subject.
	require.NoError(t, schemas.ValidateCommand("workspace.create", []byte(`{"name":""}`)))
	require.NoError(t, schemas.ValidateCommand("workspace.create", []byte(`{}`)))
	requireCode(t, schemas.ValidateCommand("workspace.create", []byte(`{"name":"Acme"}`)), schemas.CodeInvalid)
}

// pick returns the command a test body is for: task.claim when it names an
// executor, else task.create.
func pick(body string) string {
	if strings.Contains(body, `"executor"`) {
		return "task.claim"
	}
	return "task.create"
}

func TestValidateCommandMalformed(t *testing.T) {
	cases := map[string]string{
		``:                       "is empty",
		"  \n ":                  "is empty",
		`{"task_id":`:            "ends early (at byte 11)",
		`{"task_id" "x"}`:        "after object key (at byte 11)",
		`{"task_id":"x"} {}`:     "more data follows it (at byte 16)",
		"{\"task_id\":\"\xff\"}": "not valid UTF-8 (at byte 12)",
		`nul`:                    "not valid JSON",
	}
	for body, want := range cases {
		e := requireError(t, schemas.ValidateCommand("task.cancel", []byte(body)), schemas.CodeInvalid)
		require.Contains(t, e.Message, want, "%q", body)
		require.Contains(t, e.Message, "the task.cancel command ", "%q", body)
	}
	e := requireError(t, schemas.ValidateCommand("task.cancel", []byte(`[]`)), schemas.CodeInvalid)
	require.Equal(t, []schemas.FieldError{{Pointer: "", Message: "must be an object, not an array"}}, e.Fields)
}

func TestValidateCommandBoundsComeFirst(t *testing.T) {
	// Neither is JSON, so only a check made before decoding can say this.
	huge := append([]byte(`{"x":"`), make([]byte, schemas.MaxMessageBytes)...)
	requireCode(t, schemas.ValidateCommand("task.cancel", huge), schemas.CodeTooLarge)
	deep := []byte(strings.Repeat("[", schemas.MaxDepth+1) + "oops")
	e := requireError(t, schemas.ValidateCommand("task.cancel", deep), schemas.CodeInvalid)
	require.Contains(t, e.Message, "33 deep")
	// Deep nesting inside an opaque input is refused too.
	input := strings.Repeat(`{"a":`, schemas.MaxDepth) + "1" + strings.Repeat("}", schemas.MaxDepth)
	requireCode(t, schemas.ValidateCommand("task.create", []byte(`{"spec":{"queue":"q","input":`+input+`}}`)), schemas.CodeInvalid)
}

func TestValidateCommandBoundsNumbers(t *testing.T) {
	long := "1" + strings.Repeat("0", schemas.MaxNumberLength)
	body := `{"task_id":"` + taskID + `","attempt":1e999999,"token":"` + token + `","error":{"message":""},"retryable":"yes","extra":` + long + `}`
	e := requireError(t, schemas.ValidateCommand("task.fail", []byte(body)), schemas.CodeInvalid)
	got := fieldMap(e)
	require.Contains(t, got["/attempt"], "exponent is out of range")
	require.Contains(t, got["/extra"], "is a number of 101 characters")
	require.Equal(t, "must not be empty", got["/error/message"], "the rest of the message is still checked")
	require.Equal(t, "must be a boolean, not a string", got["/retryable"])
	require.Len(t, got, 4)
	// In opaque JSON as well: a validator may compare it.
	requireCode(t, schemas.ValidateCommand("task.checkpoint", []byte(`{"task_id":"`+taskID+`","attempt":1,"token":"`+token+`","checkpoint":[1e-999]}`)), schemas.CodeInvalid)
	require.NoError(t, schemas.ValidateCommand("task.checkpoint", []byte(`{"task_id":"`+taskID+`","attempt":1,"token":"`+token+`","checkpoint":[1e-300, 1.5E+300, -0.0]}`)))
}

func TestValidateCommandCapsFields(t *testing.T) {
	tasks := make([]string, 300)
	for i := range tasks {
		tasks[i] = fmt.Sprintf(`{"key":"t%d"}`, i)
	}
	body := `{"goal_id":"` + goalID + `","tasks":[` + strings.Join(tasks, ",") + `]}`
	e := requireError(t, schemas.ValidateCommand("plan.submit", []byte(body)), schemas.CodeInvalid)
	require.Len(t, e.Fields, schemas.MaxFieldErrors)
	require.Equal(t, "/tasks/0/queue", e.Fields[0].Pointer)
	require.Equal(t, "/tasks/99/queue", e.Fields[99].Pointer)
	require.Contains(t, e.Message, "and 297 more")
	require.Contains(t, e.Message, "only the first 100 are listed")
}

func TestValidateUnknown(t *testing.T) {
	e := requireError(t, schemas.ValidateCommand("task.launch", []byte(`{}`)), schemas.CodeNotFound)
	require.Contains(t, e.Message, `"task.launch"`)
	require.Contains(t, e.Message, "task.create, task.delegate, task.fail")
	require.ErrorIs(t, e, schemas.ErrNotFound)

	e = requireError(t, schemas.ValidateEvent("task.launched", []byte(`{}`)), schemas.CodeNotFound)
	require.Contains(t, e.Message, "task.created")

	requireCode(t, schemas.Validate("nope.json", []byte(`{}`)), schemas.CodeNotFound)
	requireCode(t, schemas.Validate(schemas.PathCommon, []byte(`{}`)), schemas.CodeNotFound)
}

func TestValidateEvent(t *testing.T) {
	require.NoError(t, schemas.ValidateEvent("goal.achieved", []byte(`{}`)))
	e := requireError(t, schemas.ValidateEvent("goal.achieved", []byte(`{"why":"done"}`)), schemas.CodeInvalid)
	require.Contains(t, e.Message, "the data of a goal.achieved event is invalid: /why: is not a known field")
	e = requireError(t, schemas.ValidateEvent("task.waiting", []byte(`{"kind":"timer"}`)), schemas.CodeInvalid)
	require.Equal(t, map[string]string{"/until": "is required"}, fieldMap(e))
}

func TestValidateEnvelopeChecksData(t *testing.T) {
	env := func(typ, agg, data string) []byte {
		return []byte(`{"id":"01JWTMSE7GB6JV3ZQ0HXBH4GJ2","type":"` + typ + `","v":1,"ws":"acme","agg":"` + agg +
			`","agg_id":"` + taskID + `","ver":2,"cmd":"c1","time":"2025-06-03T10:18:30Z","data":` + data + `}`)
	}
	require.NoError(t, schemas.Validate(schemas.PathEnvelope, env("task.accepted", "task", `{"attempt":1}`)))
	e := requireError(t, schemas.Validate(schemas.PathEnvelope, env("task.accepted", "task", `{"attempt":0}`)), schemas.CodeInvalid)
	require.Equal(t, map[string]string{"/data/attempt": "must be at least 1 (got 0)"}, fieldMap(e))
	e = requireError(t, schemas.Validate(schemas.PathEnvelope, env("task.accepted", "goal", `{"attempt":1}`)), schemas.CodeInvalid)
	require.Equal(t, map[string]string{"/agg": `must be "task"`}, fieldMap(e))
	e = requireError(t, schemas.Validate(schemas.PathEnvelope, env("task.launched", "task", `{}`)), schemas.CodeInvalid)
	require.Contains(t, fieldMap(e)["/type"], "must be one of")
}

// TestErrorEncodesAsTheContract proves that an *Error put in a reply is what
// error.json describes.
func TestErrorEncodesAsTheContract(t *testing.T) {
	for _, err := range []error{
		schemas.ValidateCommand("plan.submit", []byte(`{"tasks":[{}],"x":1}`)),
		schemas.ValidateCommand("nope", nil),
		schemas.ValidateCommand("task.cancel", []byte(`{`)),
		schemas.CheckBounds(make([]byte, 10), 5, 0),
	} {
		b, merr := json.Marshal(map[string]any{"ok": false, "error": err})
		require.NoError(t, merr)
		require.NoError(t, schemas.Validate(schemas.PathError, b), "%s", b)
	}
}

// A reply may carry next, a list's cursor: optional, never empty.
func TestReplyMayCarryANextCursor(t *testing.T) {
	reply := func(next string) []byte {
		return []byte(`{"ok":true,"result":{"id":"` + taskID + `","state":"ready","version":1},"seq":7` + next + `}`)
	}
	require.NoError(t, schemas.Validate(schemas.PathReply, reply("")))
	require.NoError(t, schemas.Validate(schemas.PathReply, reply(`,"next":"ready/`+taskID+`"`)))
	e := requireError(t, schemas.Validate(schemas.PathReply, reply(`,"next":""`)), schemas.CodeInvalid)
	require.Contains(t, fieldMap(e), "/next")
}

func TestValidateCommandRefusesRepeatedKeys(t *testing.T) {
	body := `{"task_id":"` + taskID + `","spec":{"queue":"q","retry":[],"retry":{}},"task_id":"` + taskID + `"}`
	e := requireError(t, schemas.ValidateCommand("task.create", []byte(body)), schemas.CodeInvalid)
	require.Equal(t, map[string]string{
		"/spec/retry": "appears more than once in its object",
		"/task_id":    "appears more than once in its object",
	}, fieldMap(e))
}

func TestValidateApprovalSettings(t *testing.T) {
	spec := func(approval string) []byte {
		return []byte(`{"task_id":"` + taskID + `","spec":{"queue":"q","approval":` + approval + `}}`)
	}
	require.NoError(t, schemas.ValidateCommand("task.create", spec(`{}`)))
	require.NoError(t, schemas.ValidateCommand("task.create", spec(`{"role":"legal","responses":[],"branches":{"revise":"resume"},"on_expiry":"escalate","escalate_to":"board","basis":[1]}`)))
	require.NoError(t, schemas.ValidateCommand("task.create", spec(`{"responses":["escalate","approve"],"escalate_to":"board"}`)))
	cases := map[string]map[string]string{
		`{"responses":["approve","approve"]}`:  {"/spec/approval/responses": "lists the same value twice (entries 0 and 1)"},
		`{"responses":["approve","escalate"]}`: {"/spec/approval/escalate_to": "is required"},
		`{"branches":{"approve":"accept"}}`:    {"/spec/approval/branches/approve": `must be one of "resume", "reject", "fail", "escalate" (got "accept")`},
		`{"on_expiry":"approve"}`:              {"/spec/approval/on_expiry": `must be one of "resume", "reject", "fail", "escalate" (got "approve")`},
		`{"role":"Finance Team"}`:              {"/spec/approval/role": `must be a name of 1-63 lower-case letters, digits, '_' or '-', starting with a letter or digit (got "Finance Team")`},
		`{"responses":["request_revision"]}`:   {"/spec/approval/responses/0": `must be one of "approve", "reject", "revise", "escalate" (got "request_revision")`},
	}
	for approval, want := range cases {
		e := requireError(t, schemas.ValidateCommand("task.create", spec(approval)), schemas.CodeInvalid)
		require.Equal(t, want, fieldMap(e), approval)
	}
	e := requireError(t, schemas.ValidateCommand("task.create", spec(`{"branches":{"revize":"resume"}}`)), schemas.CodeInvalid)
	require.Contains(t, fieldMap(e)["/spec/approval/branches/revize"], `did you mean "revise"?`)

	// An attempt's request must carry its action; escalate_to may come from
	// the task's approval spec, so the command does not require it.
	e = requireError(t, schemas.ValidateCommand("task.request_approval", []byte(`{"task_id":"`+taskID+`","attempt":1,"token":"`+token+`"}`)), schemas.CodeInvalid)
	require.Equal(t, map[string]string{"/action": "is required"}, fieldMap(e))
	require.NoError(t, schemas.ValidateCommand("task.request_approval", []byte(`{"task_id":"`+taskID+`","attempt":1,"token":"`+token+`","action":null,"responses":["escalate"]}`)))

	e = requireError(t, schemas.ValidateCommand("timer.fire", []byte(`{"task_id":"`+taskID+`","kind":"approval_expiry","due":"2025-06-03T10:22:40Z"}`)), schemas.CodeInvalid)
	require.Equal(t, map[string]string{"/attempt": "is required"}, fieldMap(e))
	e = requireError(t, schemas.ValidateCommand("timer.fire", []byte(`{"task_id":"`+taskID+`","kind":"approval_expiry","attempt":0,"due":"2025-06-03T10:22:40Z"}`)), schemas.CodeInvalid)
	require.Equal(t, map[string]string{"/attempt": "must be at least 1 (got 0)"}, fieldMap(e))
	require.NoError(t, schemas.ValidateCommand("timer.fire", []byte(`{"task_id":"`+taskID+`","kind":"task_deadline","due":"2025-06-03T10:22:40Z"}`)))

	// A request is pending, undecided and unrefused.
	requested := `{"id":"` + taskID + `-1","task_id":"` + taskID + `","action":null,"action_digest":"sha256:` + strings.Repeat("0", 64) +
		`","responses":["approve"],"branches":{"approve":"resume"},"requested_at":"2025-06-03T10:22:40Z","state":"pending"`
	require.NoError(t, schemas.ValidateEvent("task.approval_requested", []byte(requested+`}`)))
	e = requireError(t, schemas.ValidateEvent("task.approval_requested", []byte(requested+`,"refusals":[]}`)), schemas.CodeInvalid)
	require.Equal(t, map[string]string{"/refusals": "is not allowed here"}, fieldMap(e))
}

// nkeysUser is a NATS user's public key made by nkeys.CreateUser.
const nkeysUser = "UDYAX3UDQZWCSL2WQ66QSQOI2XO3ZEN3VHDFI6FUE7JT3D73CCFW7NNJ"

func TestValidateMembers(t *testing.T) {
	add := func(fields string) []byte {
		return []byte(`{"name":"runner","public_key":"` + nkeysUser + `",` + fields + `}`)
	}
	for _, ok := range []string{`"role":"admin"`, `"role":"client"`, `"role":"approver"`, `"role":"viewer"`,
		`"role":"executor","queues":["build"]`, `"role":"executor","queues":["build","test-2"]`} {
		require.NoError(t, schemas.ValidateCommand("member.add", add(ok)), ok)
	}
	many := make([]string, 101)
	for i := range many {
		many[i] = fmt.Sprintf("q%d", i)
	}
	manyJSON, err := json.Marshal(many)
	require.NoError(t, err)
	cases := map[string]map[string]string{
		`"role":"owner"`:                                 {"/role": `must be one of "admin", "client", "executor", "approver", "viewer" (got "owner")`},
		`"role":"executor"`:                              {"/queues": "is required"},
		`"role":"executor","queues":[]`:                  {"/queues": "must have at least one entry"},
		`"role":"viewer","queues":["build"]`:             {"/queues": "is not allowed here"},
		`"role":"admin","queues":[]`:                     {"/queues": "is not allowed here"},
		`"role":"executor","queues":["a","a"]`:           {"/queues": "lists the same value twice (entries 0 and 1)"},
		`"role":"executor","queues":["Build"]`:           {"/queues/0": `must be a name of 1-63 lower-case letters, digits, '_' or '-', starting with a letter or digit (got "Build")`},
		`"role":"executor","queues":` + string(manyJSON): {"/queues": "has 101 entries; at most 100 are allowed"},
	}
	for fields, want := range cases {
		e := requireError(t, schemas.ValidateCommand("member.add", add(fields)), schemas.CodeInvalid)
		require.Equal(t, want, fieldMap(e), fields)
	}
	e := requireError(t, schemas.ValidateCommand("member.add", []byte(`{"name":"runner","role":"admin","public_key":"`+strings.ToLower(nkeysUser)+`"}`)), schemas.CodeInvalid)
	require.Contains(t, fieldMap(e)["/public_key"], "must be a NATS user's public nkey")
	e = requireError(t, schemas.ValidateCommand("member.add", []byte(`{"name":"Runner","role":"admin"}`)), schemas.CodeInvalid)
	require.Equal(t, []string{"/name", "/public_key"}, sortedKeys(fieldMap(e)))
	require.NoError(t, schemas.ValidateCommand("member.remove", []byte(`{"name":"runner"}`)))
	requireCode(t, schemas.ValidateCommand("member.remove", []byte(`{}`)), schemas.CodeInvalid)
}

func TestValidateQueueSettings(t *testing.T) {
	configure := func(lease, deliver string) []byte {
		return []byte(`{"queue":"build","lease_ms":` + lease + `,"max_deliver":` + deliver + `}`)
	}
	for _, ok := range [][2]string{{"1000", "1"}, {"86400000", "1000"}, {"30000", "5"}} {
		require.NoError(t, schemas.ValidateCommand("queue.configure", configure(ok[0], ok[1])), ok)
	}
	require.NoError(t, schemas.ValidateCommand("queue.configure", []byte(`{"queue":"build","lease_ms":30000,"max_deliver":5,"if_unset":true}`)))
	cases := map[[2]string]map[string]string{
		{"999", "5"}:      {"/lease_ms": "must be at least 1000 (got 999)"},
		{"86400001", "5"}: {"/lease_ms": "must be at most 86400000 (got 86400001)"},
		{"1500.5", "5"}:   {"/lease_ms": "must be an integer, not a number with a fraction"},
		{"30000", "0"}:    {"/max_deliver": "must be at least 1 (got 0)"},
		{"30000", "1001"}: {"/max_deliver": "must be at most 1000 (got 1001)"},
		{`"30s"`, "5"}:    {"/lease_ms": "must be an integer, not a string"},
	}
	for c, want := range cases {
		e := requireError(t, schemas.ValidateCommand("queue.configure", configure(c[0], c[1])), schemas.CodeInvalid)
		require.Equal(t, want, fieldMap(e), c)
	}
	e := requireError(t, schemas.ValidateCommand("queue.configure", []byte(`{"queue":"build"}`)), schemas.CodeInvalid)
	require.Equal(t, map[string]string{"/lease_ms": "is required", "/max_deliver": "is required"}, fieldMap(e))
}

func TestValidateApproverExpiry(t *testing.T) {
	register := func(expiry string) []byte {
		return []byte(`{"name":"maria","role":"editor","public_key":"VU6Cbm8vZboUwILz9USUel4y3e+Z2bA8xTd9VGdbM9A=","expires_at":` + expiry + `}`)
	}
	require.NoError(t, schemas.ValidateCommand("approver.register", register(`"2026-06-01T00:00:00Z"`)))
	requireCode(t, schemas.ValidateCommand("approver.register", register(`"tomorrow"`)), schemas.CodeInvalid)
	requireCode(t, schemas.ValidateCommand("approver.register", register(`86400`)), schemas.CodeInvalid)
	require.NoError(t, schemas.ValidateCommand("approver.revoke", []byte(`{"name":"maria"}`)))
	e := requireError(t, schemas.ValidateCommand("approver.revoke", []byte(`{"name":"maria","role":"editor"}`)), schemas.CodeInvalid)
	require.Contains(t, fieldMap(e), "/role")
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// A report carries its attempt's token or, for the lazy claim, a claim —
// never both, never neither.
func TestValidateAReportCarriesATokenOrAClaim(t *testing.T) {
	for _, name := range []string{"task.succeed", "task.fail"} {
		extra := ""
		if name == "task.fail" {
			extra = `,"error":{"message":"x"},"retryable":true`
		}
		body := func(fields string) []byte {
			return []byte(`{"task_id":"` + taskID + `","attempt":1` + extra + fields + `}`)
		}
		require.NoError(t, schemas.ValidateCommand(name, body(`,"claim":{"executor":"e","executor_version":"1"}`)), name)
		require.NoError(t, schemas.ValidateCommand(name, body(`,"token":"`+token+`"`)), name)
		e := requireError(t, schemas.ValidateCommand(name, body(`,"token":"`+token+`","claim":{"executor":"e"}`)), schemas.CodeInvalid)
		require.Equal(t, map[string]string{"/token": "is not allowed here"}, fieldMap(e), name)
		e = requireError(t, schemas.ValidateCommand(name, body(`,"claim":{}`)), schemas.CodeInvalid)
		require.Equal(t, "is required", fieldMap(e)["/claim/executor"], name)
		e = requireError(t, schemas.ValidateCommand(name, body(`,"claim":{"executor":"e","token_hash":"x"}`)), schemas.CodeInvalid)
		require.Contains(t, fieldMap(e)["/claim/token_hash"], "is not a known field", name)
	}
}

// An execute item carries the task it runs, and validates with it.
func TestValidateAnExecuteItemWithItsTask(t *testing.T) {
	it := schemas.WorkItem{Kind: schemas.WorkKindExecute, TaskID: taskID, Workspace: "acme", Queue: "work", Attempt: 1, OperationKey: "op-" + taskID,
		Task: &schemas.Task{ID: taskID, Workspace: "acme", Spec: schemas.TaskSpec{Queue: "work", Input: json.RawMessage(`{"n":1}`)}, State: schemas.StateReady,
			Versioned: schemas.Versioned{CreatedAt: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC), UpdatedAt: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC), Version: 1}}}
	b, err := json.Marshal(it)
	require.NoError(t, err)
	require.NoError(t, schemas.Validate(schemas.PathWorkItem, b))
}

// A name that propertyNames refuses is named as the member it is, whatever
// order the body's members are validated in (the library hands that error
// its location stack, which later members overwrite).
func TestAPropertyNameIsRefusedAtItsMember(t *testing.T) {
	for range 100 {
		err := schemas.ValidateCommand("goal.label", []byte(`{"goal_id": "01JWQYPRT84TFF59TDWH9EDD1R", "set": {"Customer": "x"}, "remove": ["a"]}`))
		var se *schemas.Error
		require.ErrorAs(t, err, &se)
		require.Equal(t, "/set/Customer", se.Fields[0].Pointer)
		require.Contains(t, se.Fields[0].Message, `(got "Customer")`)
	}
}
