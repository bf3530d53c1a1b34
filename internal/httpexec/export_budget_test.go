package httpexec

// WindowsHeld returns the budget's bytes flow holds now, and all flows together (tests only).
func WindowsHeld(flow string) (int64, int64) {
	return budget.Held(flow), budget.Used()
}
