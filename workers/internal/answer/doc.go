// Package answer fits a list answer within the bus's max payload: a
// [Pager] admits items while their encoding, in the request's codec,
// fits what the max payload leaves ([Headroom] is kept for the reply's
// headers and the fields around the list), and always admits the first,
// so that a client paging with "after the last item" moves on. The
// workers' list functions (models::list, directory::skills::list,
// budget::list and budget::usage) page with it, answering truncated when
// items were left out.
package answer
