package expr

import (
	"fmt"
	"sync"
	"testing"
)

func TestCacheReturnsSameProgram(t *testing.T) {
	c := NewCache(4)
	p1, err := c.Get(`response.statusCode == 200`)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := c.Get(`response.statusCode == 200`)
	if err != nil {
		t.Fatal(err)
	}
	if p1 != p2 {
		t.Errorf("Get returned different programs for the same source")
	}
	p3, err := c.Get(`response.statusCode == 201`)
	if err != nil {
		t.Fatal(err)
	}
	if p3 == p1 {
		t.Errorf("Get returned the same program for different sources")
	}
	if c.Len() != 2 {
		t.Errorf("Len = %d, want 2", c.Len())
	}
}

func TestCacheErrors(t *testing.T) {
	c := NewCache(4)
	_, err1 := c.Get(`response.statusCode ==`)
	if err1 == nil {
		t.Fatal("want compile error")
	}
	p, err2 := c.Get(`response.statusCode ==`)
	if p != nil || err2 == nil {
		t.Fatalf("second Get = %v, %v; want nil, error", p, err2)
	}
	if err1 != err2 {
		t.Errorf("compile error not cached: %v vs %v", err1, err2)
	}
	// An error for one source does not affect another.
	if _, err := c.Get(`response.statusCode == 200`); err != nil {
		t.Errorf("valid source: %v", err)
	}
}

func TestCacheEviction(t *testing.T) {
	c := NewCache(2)
	src := func(i int) string { return fmt.Sprintf("response.statusCode == %d", i) }
	get := func(i int) *Program {
		t.Helper()
		p, err := c.Get(src(i))
		if err != nil {
			t.Fatalf("Get(%q): %v", src(i), err)
		}
		return p
	}
	a := get(1)
	get(2)
	get(1) // 1 is now most recently used
	get(3) // evicts 2
	if c.Len() != 2 {
		t.Fatalf("Len = %d, want 2", c.Len())
	}
	if a2, _ := c.Get(src(1)); a2 != a {
		t.Errorf("recently used entry was evicted")
	}
	if c.Len() != 2 {
		t.Errorf("Len = %d, want 2", c.Len())
	}
	if NewCache(0).size != DefaultCacheSize {
		t.Errorf("NewCache(0) size = %d, want %d", NewCache(0).size, DefaultCacheSize)
	}
}

func TestCacheConcurrent(t *testing.T) {
	c := NewCache(8)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for j := range 50 {
				p, err := c.Get(fmt.Sprintf("response.statusCode == %d", j%10))
				if err != nil {
					t.Error(err)
					return
				}
				if ok, err := p.Eval(Response{StatusCode: j % 10}); err != nil || !ok {
					t.Errorf("Eval = %v, %v", ok, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if c.Len() > 8 {
		t.Errorf("Len = %d, want <= 8", c.Len())
	}
}
