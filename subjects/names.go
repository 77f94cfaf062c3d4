package subjects

import (
	"fmt"
	"strings"
)

// Streams, buckets and subjects of the engine. Every name lives here so that
// an operator can read the whole NATS footprint of iii in one place.
const (
	// StateBucket is the KV bucket behind state::*; keys are
	// "<scope>.<escaped key>" ([StateKVKey]).
	StateBucket = "iii-state"
	// StateKVStream is the JetStream stream behind [StateBucket].
	StateKVStream = "KV_" + StateBucket
	// StateKVSubjectPrefix prefixes the subject of every state key.
	StateKVSubjectPrefix = "$KV." + StateBucket + "."

	// QueueStream is the work-queue stream behind every durable queue; its
	// subjects are [QueueSubject].
	QueueStream = "III_QUEUE"
	// QueueSubjectPrefix prefixes every durable queue's subject.
	QueueSubjectPrefix = "iii.queue."
	// DLQStream keeps dead-lettered queue messages for inspection and
	// redrive; its subjects are [DLQSubject].
	DLQStream = "III_DLQ"
	// DLQSubjectPrefix prefixes every dead-letter subject.
	DLQSubjectPrefix = "iii.dlq."

	// TopicStream is the stream behind durable topics ([TopicSubject]).
	TopicStream = "III_TOPIC"
	// TopicSubjectPrefix prefixes every durable topic's subject.
	TopicSubjectPrefix = "iii.topic."
	// PubSubSubjectPrefix prefixes plain (non-durable) pub/sub topics.
	PubSubSubjectPrefix = "iii.pubsub."

	// ChannelSubjectPrefix prefixes channel subjects ([ChannelSubject]).
	ChannelSubjectPrefix = "iii.ch."

	// CronBucket holds cron leases, one key "<job id>.<tick unix ms>" per
	// job and tick.
	CronBucket = "iii-cron"
	// CronJobsBucket holds cron job definitions, one key per job id.
	CronJobsBucket = "iii-cron-jobs"

	// HTTPRoutesBucket holds the HTTP trigger gateway's routes.
	HTTPRoutesBucket = "iii-http-routes"
)

// QueueSubject is the subject of queue name ("iii.queue.<name>").
func QueueSubject(name string) (string, error) {
	if err := ValidateID("queue", name); err != nil {
		return "", err
	}
	return QueueSubjectPrefix + name, nil
}

// QueueConsumer is the durable consumer name of queue name.
func QueueConsumer(name string) string { return "queue-" + name }

// DLQSubject is the dead-letter subject of queue name ("iii.dlq.<name>").
func DLQSubject(name string) (string, error) {
	if err := ValidateID("queue", name); err != nil {
		return "", err
	}
	return DLQSubjectPrefix + name, nil
}

// TopicSubject is the subject of durable topic name ("iii.topic.<name>").
func TopicSubject(name string) (string, error) {
	if err := ValidateID("topic", name); err != nil {
		return "", err
	}
	return TopicSubjectPrefix + name, nil
}

// PubSubSubject is the core NATS subject of plain topic name.
func PubSubSubject(name string) (string, error) {
	if err := ValidateID("topic", name); err != nil {
		return "", err
	}
	return PubSubSubjectPrefix + name, nil
}

// ConsumerName derives a durable consumer name from a function id, so that
// every replica of one function binds the same consumer. The function id is
// encoded like a subject with '.' replaced by '_'; '~' is kept (it is legal
// in consumer names), so the name stays injective. The name is not
// bounded: a long function id makes one past JetStream's 255 bytes, so a
// caller bounds it (engine/topic refuses a longer one, engine/state cuts
// it and appends a hash).
func ConsumerName(prefix, functionID string) (string, error) {
	subj, err := FunctionSubject(functionID)
	if err != nil {
		return "", err
	}
	tail := subj[len(FunctionPrefix):]
	out := make([]byte, 0, len(prefix)+1+len(tail))
	out = append(out, prefix...)
	out = append(out, '_')
	for i := 0; i < len(tail); i++ {
		c := tail[i]
		if c == '.' {
			// '.' is illegal in consumer names. An encoded token never
			// holds "~~" ('~' always starts a hex escape), so it marks the
			// segment boundary without ambiguity.
			out = append(out, '~', '~')
			continue
		}
		out = append(out, c)
	}
	return string(out), nil
}

// ChannelSubject is the subject of channel id ("iii.ch.<id>").
func ChannelSubject(id string) (string, error) {
	if err := ValidateID("channel", id); err != nil {
		return "", err
	}
	return ChannelSubjectPrefix + id, nil
}

// Channel side subjects: a channel's reader sends credit and cancel on
// "<channel subject>.ack" and answers a writer's credit requests on
// "<channel subject>.ping".
const (
	ChannelAckSuffix  = ".ack"
	ChannelPingSuffix = ".ping"
)

// The turn loop's names (orchestrator worker).
const (
	// TurnStateBucket holds one TurnStateRecord per session (key = session
	// id); every write is a compare-and-set on the key's revision.
	TurnStateBucket = "iii-turn-state"
	// RunsBucket remembers run::start idempotency keys
	// ("<session id>.<key hash>") for a day.
	RunsBucket = "iii-runs"
	// InboxBucket holds the steering and follow-up inboxes
	// ("<session id>.steering", "<session id>.followup").
	InboxBucket = "iii-inbox"
	// StepStream is the durable turn-step queue; subjects
	// [StepSubject]. Its consumer [StepConsumer] wakes session grains.
	StepStream = "III_TURN_STEPS"
	// StepSubjectPrefix prefixes every session's step subject.
	StepSubjectPrefix = "iii.turn.step."
	// StepConsumer is the orchestrators' shared durable step consumer.
	StepConsumer = "orchestrator"
	// StepHostSubjectPrefix prefixes the core-NATS subject on which one
	// orchestrator takes the steps of runs its grains started already
	// ([StepHostSubject]); not part of any stream.
	StepHostSubjectPrefix = "iii.turn.host."
	// EventStream keeps every session's events; subjects [EventSubject].
	EventStream = "III_EVENTS"
	// EventSubjectPrefix prefixes every session's event subject.
	EventSubjectPrefix = "iii.events."
)

// StepSubject is the step subject of session sid ("iii.turn.step.<sid>").
func StepSubject(sid string) (string, error) {
	if err := ValidateSessionID(sid); err != nil {
		return "", err
	}
	return StepSubjectPrefix + sid, nil
}

// StepHostSubject is the subject of the orchestrator whose grain host has
// id ("iii.turn.host.<id>"): a step that another orchestrator consumed
// is handed to it there. id is one token (A-Z a-z 0-9 _ -).
func StepHostSubject(id string) (string, error) {
	if err := ValidateID("host id", id); err != nil {
		return "", err
	}
	return StepHostSubjectPrefix + id, nil
}

// EventSubject is the event subject of session sid ("iii.events.<sid>").
func EventSubject(sid string) (string, error) {
	if err := ValidateSessionID(sid); err != nil {
		return "", err
	}
	return EventSubjectPrefix + sid, nil
}

// The chokepoint's names (approval gate, hooks).
const (
	// ApprovalsBucket holds one ApprovalRecord per parked call, key
	// [ApprovalKey]. The orchestrators watch it: a decision written while
	// they are down is found when they come back.
	ApprovalsBucket = "iii-approvals"
	// ApprovalsKVStream is the JetStream stream behind [ApprovalsBucket].
	ApprovalsKVStream = "KV_" + ApprovalsBucket
	// ApprovalsKVSubjectPrefix prefixes the subject of every approvals key.
	ApprovalsKVSubjectPrefix = "$KV." + ApprovalsBucket + "."
	// ApprovalsConsumer is the orchestrators' shared durable consumer on
	// [ApprovalsKVStream]: their one watcher of decisions.
	ApprovalsConsumer = "orchestrator-approvals"
	// ApprovalSettingsBucket holds each session's approval settings (key =
	// session id).
	ApprovalSettingsBucket = "iii-approval-settings"
	// HookSubjectPrefix prefixes a hook topic's subject ([HookSubject]):
	// any NATS client subscribes to it to take part in a hook.
	HookSubjectPrefix = "iii.hook."
)

// ApprovalKey is the approvals-bucket key of call callID of session sid:
// "<sid>.<KVKey(callID)>". Call ids are chosen by model providers, so they
// are escaped; a call id containing '/' has no key.
func ApprovalKey(sid, callID string) (string, error) {
	if err := ValidateSessionID(sid); err != nil {
		return "", err
	}
	if strings.Contains(callID, "/") {
		return "", fmt.Errorf("%w: function call id %q contains '/'", ErrInvalidKey, callID)
	}
	k, err := KVKey(callID)
	if err != nil {
		return "", err
	}
	return sid + "." + k, nil
}

// SplitApprovalKey is the inverse of [ApprovalKey].
func SplitApprovalKey(key string) (sid, callID string, err error) {
	// The call part is one token (a call id has no '/'), so the session id
	// ("<sid>" or "<region>.<name>") is everything before the last dot.
	i := strings.LastIndexByte(key, '.')
	if i < 0 {
		return "", "", fmt.Errorf("%w: %q has no session", ErrInvalidKey, key)
	}
	sid, rest := key[:i], key[i+1:]
	if err := ValidateSessionID(sid); err != nil {
		return "", "", err
	}
	callID, err = KeyFromKV(rest)
	return sid, callID, err
}

// ApprovalSessionFilter is the approvals-bucket key filter of every call of
// session sid ("<sid>.>").
func ApprovalSessionFilter(sid string) (string, error) {
	if err := ValidateSessionID(sid); err != nil {
		return "", err
	}
	return sid + ".>", nil
}

// HookSubject is the subject of hook topic (a function-id-like name such
// as "agent::before_function_call"): [HookSubjectPrefix] followed by the
// tokens [FunctionSubject] makes of it ("iii.hook.agent.before_function_call").
func HookSubject(topic string) (string, error) {
	s, err := FunctionSubject(topic)
	if err != nil {
		return "", err
	}
	return HookSubjectPrefix + strings.TrimPrefix(s, FunctionPrefix), nil
}

// The model layer's names (models, budget workers).
const (
	// ModelsBucket holds model catalog entries reconciled from providers'
	// /v1/models ("<provider>.<KVKey(model id)>"), on top of the embedded
	// catalog.
	ModelsBucket = "iii-models"
	// BudgetsBucket is the budget ledger: budget definitions, per-period
	// spend and reservations, every change a compare-and-set.
	BudgetsBucket = "iii-budgets"
	// BudgetAlertSubjectPrefix prefixes budget alert events
	// ("iii.budget.alert.<budget id>"), kept in [BudgetAlertStream].
	BudgetAlertSubjectPrefix = "iii.budget.alert."
	// BudgetAlertStream keeps budget alerts.
	BudgetAlertStream = "III_BUDGET_ALERTS"
)

// SkillsBucket holds skill documents (markdown), one key per skill
// ([SkillKey]).
const SkillsBucket = "iii-skills"

// SkillKey is the KV key of the skill of function functionID published by
// worker: [KVKey] of "<worker>/<function id>" ("sandbox/fs::read" →
// "sandbox.fs=3A=3Aread"). [SkillID] reverses it.
func SkillKey(worker, functionID string) (string, error) {
	if err := ValidateID("worker", worker); err != nil {
		return "", err
	}
	if err := ValidateFunctionID(functionID); err != nil {
		return "", err
	}
	return KVKey(worker + "/" + functionID)
}

// SkillID maps a skills bucket key back onto "<worker>/<function id>".
func SkillID(kvKey string) (worker, functionID string, err error) {
	id, err := KeyFromKV(kvKey)
	if err != nil {
		return "", "", err
	}
	worker, functionID, ok := strings.Cut(id, "/")
	if !ok || ValidateID("worker", worker) != nil || ValidateFunctionID(functionID) != nil {
		return "", "", fmt.Errorf("%w: %q is not a skill key", ErrInvalidKey, kvKey)
	}
	return worker, functionID, nil
}

// The session tree's names (workers/sessiontree).
const (
	// SessionEntryStream keeps every entry of every session, one stream
	// message per entry; the stream sequence is the entry's identity.
	SessionEntryStream = "III_SESSION_ENTRIES"
	// SessionEntrySubjectPrefix prefixes a session's entry subject.
	SessionEntrySubjectPrefix = "iii.session.entries."
	// SessionsBucket holds one meta record per session (key = session id).
	SessionsBucket = "iii-sessions"
)

// SessionEntrySubject is the entry subject of session sid
// ("iii.session.entries.<sid>").
func SessionEntrySubject(sid string) (string, error) {
	if err := ValidateSessionID(sid); err != nil {
		return "", err
	}
	return SessionEntrySubjectPrefix + sid, nil
}

// SandboxesBucket holds one record per live sandbox (workers/sandbox):
// its session, node, workdir and limits.
const SandboxesBucket = "iii-sandboxes"

// The compaction worker's names (workers/compaction).
const (
	// CompactionLeasesBucket holds one lease per session being compacted
	// (key = session id), created with a per-key TTL (LimitMarkerTTL on).
	CompactionLeasesBucket = "iii-compaction-leases"
	// CompactionConsumer is the compaction workers' shared durable
	// consumer on [EventStream] (the threshold trigger).
	CompactionConsumer = "compaction"
)

// The trace store's names (workers/traces).
const (
	// SpanStream keeps every exported span (limits retention, 24 h and
	// 256 MiB by default).
	SpanStream = "III_SPANS"
	// SpanSubjectPrefix prefixes span subjects: "iii.spans.<trace id hex>".
	SpanSubjectPrefix = "iii.spans."
)

// Cluster membership and grain placement (package cluster/membership and
// cluster/placement): proto.actor members heartbeat their entry in
// MembersBucket (key "<cluster>.<member id>", bucket TTL); the member that
// hosts a grain owns its key in GrainsBucket (key "<kind>.<identity>",
// value the member id), created with CAS so a grain has one activation.
const (
	MembersBucket = "iii-members"
	GrainsBucket  = "iii-grains"
)
