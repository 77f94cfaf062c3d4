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
//   - a subscriber whose process is down keeps its consumer, and gets what
//     was published meanwhile when it comes back;
//   - each delivery calls the function with the message's codec and trace
//     context; errors are retried with backoff exactly as queue messages
//     are (the loop is package queue's [queue.Attach]); a message that uses
//     up its deliveries is terminated and logged — topics have no
//     dead-letter subject.
//
// [Unsubscribe] deletes a function's consumer for good; a Subscription's
// Stop and Close only stop this process's delivery.
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
// [Serve] registers topic::publish {topic, data} on worker "topic", so any
// client can publish: nats req iii.fn.topic.publish '{"topic":"orders","data":{}}'.
package topic
