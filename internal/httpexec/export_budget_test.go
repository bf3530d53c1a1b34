package httpexec

// WindowsHeld returns the decoder-window bytes flow holds now, and all flows together (tests only).
func WindowsHeld(flow string) (int64, int64) {
	windows.mu.Lock()
	defer windows.mu.Unlock()
	return windows.byFlow[flow], windows.used
}
