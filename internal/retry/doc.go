// Package retry holds the pure retry decisions of actionledger (DESIGN rules 4 and 5):
// how one attempt is classified, how long to wait before the next one, how a
// Retry-After header is read, and when retrying must stop.
//
// Nothing here sleeps, reads the clock or performs I/O: the current time and the
// random source are parameters, so every decision is reproducible in tests.
package retry
