// Package cron runs cron triggers on the bus: a job {id, expression,
// function_id, data} calls its function at every tick of its expression,
// once per tick across the whole cluster.
//
// # Expressions
//
// [Parse] reads standard five-field expressions ("minute hour dom month
// dow"), six fields with a leading seconds field, lists, ranges, steps,
// month and weekday names, the @hourly/@daily/@weekly/@monthly/@yearly
// shorthands and "@every <duration>". [Expression.Next] is the first tick
// strictly after a time, in UTC or the job's time zone. In a zone with
// daylight saving time a wall time that a change skips does not fire, and
// one that a change repeats fires once, at its first occurrence (also for
// a scheduler that starts during the repeated hour). The parser is
// hand-written on the standard library and fuzzed.
//
// # Jobs and schedulers
//
// Jobs live in the KV bucket [JobsBucket] ("iii-cron-jobs", JSON, one key
// per job id), written by [Schedule] / [Unschedule] or by the functions
// cron::schedule, cron::unschedule and cron::list that [Serve] registers.
// Every node runs one [Scheduler] ([Start]); each watches the bucket, so all
// of them run the same set and follow changes live. A watch that ends, or
// a bucket deleted and created again under it (`nats kv rm`/`add`, a
// restore; checked every 5s), is opened again with backoff, and the
// bucket's contents then replace the running set: jobs it holds unchanged
// run on untouched, the others are replaced or stopped. While the bucket is
// gone the running jobs go on as they were: the watch waits for it and
// does not create it ([Start], [Schedule] and [List] do).
//
// cron::list {after?, limit?} pages: it answers the jobs by id after
// "after", at most limit ([DefaultListLimit], up to [MaxListLimit]) and
// fewer when more would outgrow the max payload, with truncated: true
// while more follow (ask again with after set to the last id). A job too
// large for an answer alone is listed without its data (data_omitted);
// [List] reads every job whole.
//
// A change takes effect at the moment a scheduler applies it: the old
// definition still claims its ticks due by then (one that fell due as the
// change arrived, not claimed yet, fires once, as the old definition says), the new
// one those after it. So a tick of the old schedule that is not due yet
// when the change is applied does not fire, nor does a removed job's. Nodes
// apply a change at slightly different moments; the lease still lets one
// tick fire at most once, with either definition.
//
// Every scheduler computes every tick. For a tick, each one tries to create
// the lease key "<job id>.<tick unix ms>" in [subjects.CronBucket] with a
// per-key TTL; KV create succeeds for exactly one of them, and that node
// calls the function (a synchronous trigger, not retried) with an [Event]:
//
//	{"job_id":"nightly","tick":"2030-01-02T00:00:00.000Z","tick_ms":1893542400000,"data":{...}}
//
// So a tick fires at most once (while the nodes' clocks agree within the
// misfire grace: the lease lives twice the grace plus a second), and once
// while any scheduler is up and JetStream answers; a scheduler killed
// between its lease and its call, or whose lease was stored under a create
// that answered a timeout, loses that tick (the lease names it taken), and
// a call that fails is not retried. Ticks missed while no scheduler ran are
// not caught up; a scheduler that wakes later than its misfire grace skips
// the tick ([WithMisfireGrace]). A waiting job reads the clock again at
// least every half grace, so a tick that a host suspend or a step of the
// wall clock makes due at once still fires. Calls are not serialized: a
// call that runs longer than its job's interval overlaps the next tick's
// (each is bounded by [WithFireTimeout]). A function that must not lose a
// tick should enqueue durable work and return at once.
//
// Lifecycle: Start → (jobs come and go through the bucket) → Close. Time
// comes from a [Clock] ([WithClock]), so tests move a fake clock instead of
// waiting for midnight.
//
//	sched, err := cron.Start(ctx, e)
//	if err != nil { ... }
//	defer sched.Close(ctx)
//	err = cron.Schedule(ctx, e, cron.Job{ID: "nightly", Expression: "0 3 * * *",
//		FunctionID: "reports::build", Data: map[string]any{"kind": "daily"}})
package cron
