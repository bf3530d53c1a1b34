// Package chaos holds the chaos run: the real manager binary, run as separate OS processes against a local
// control plane, is SIGKILLed and restarted at random moments (sometimes two run at once) while actions are
// sent through a toxiproxy to the recording destination. The run asserts that no key is applied twice and that
// no action is lost. See docs/chaos.md; `make chaos` runs the long variant.
package chaos
