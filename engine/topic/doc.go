// Package topic is iii's publish/subscribe (SPEC §3) in two flavours.
//
// Durable topics live on stream III_TOPIC (subject "iii.topic.<name>",
// interest retention). A function subscribes with [Subscribe]; its
// subscription is a durable JetStream consumer named by [ConsumerName], so
//
//   - every subscribing function gets every message published after it
//     subscribed (or, with [WithDeliverAll], everything still kept);
//   - replicas of one function bind the same consumer and split the
//     messages: each message runs once per function;
//   - a message published while no function is subscribed is not kept;
//   - a subscriber whose process is down keeps its consumer, and gets what
//     was published meanwhile when it comes back, if that is younger than
//     the stream's MaxAge (7 days unless an operator changed it);
//   - each delivery calls the function with the message's codec and trace
//     context; errors are retried with backoff exactly as queue messages
//     are (the loop is package queue's [queue.Attach]); a message that uses
//     up its deliveries is terminated and logged — topics have no
//     dead-letter subject;
//   - messages are not ordered: up to [WithConcurrency] calls run at once,
//     and a retried message comes back after later ones;
//   - a payload must fit under the server's max payload together with its
//     headers and those a subscriber's call adds (timeout, trace parent);
//     [Publish] refuses a larger one as invalid_payload rather than store
//     a message no delivery could carry.
//
// [Unsubscribe] deletes a function's consumer for good, and every running
// Subscription of it ends (its Closed channel closes), as it does when the
// consumer is deleted by hand; a Subscription's Stop and Close only stop
// this process's delivery.
//
// Plain topics are core NATS subjects "iii.pubsub.<name>" with no
// persistence: [PublishPlain] reaches the functions subscribed with
// [SubscribePlain] at that moment, at most once, as void calls.
//
// # Lifecycle
//
//	sub, err := topic.Subscribe(ctx, e, "orders", "billing::on_order")
//	defer sub.Close(ctx)
//	err = topic.Publish(ctx, e, "orders", Order{ID: "o-1"})
//
// [Serve] registers topic::publish {topic, data, dedup_id?} on worker
// "topic", so any client can publish: nats req iii.fn.topic.publish
// '{"topic":"orders","data":{}}'. A dedup_id makes a retried publish (its
// answer lost) a no-op within the stream's duplicate window.
package topic
