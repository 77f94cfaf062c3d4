package openai

// maxErrorResponse bounds what is read of a response with an error status.
// The SDK reads such a body whole to build its error (and the provider
// then reads at most [maxErrorBody] of it): a broken or hostile server
// answering with an endless body would otherwise make the process
// allocate all of it. Past it the body reads as ended, and closing it
// drops the connection rather than draining the rest.
const maxErrorResponse = 64 << 10

// MaxModelsResponse bounds the body of GET <base_url>/models: the SDK reads
// it whole to decode it, so an endless body from a broken or hostile
// server would otherwise be allocated whole. The lists of the largest
// gateways are a few hundred KiB. A longer body fails the models call with
// a permanent error naming the limit, and its connection is dropped.
const MaxModelsResponse = 8 << 20
