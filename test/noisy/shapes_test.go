package noisy

import "testing"

// The refused shapes are refused and the admitted ones admitted by this tree's compiler, with the messages the
// cluster test and the benchmark look for.
func TestShapes(t *testing.T) {
	if err := CheckShapes(); err != nil {
		t.Fatal(err)
	}
	for _, s := range Refused {
		t.Logf("%s: %s", s.Name, s.CompileError())
	}
}
