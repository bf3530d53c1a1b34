package expr

import (
	"container/list"
	"sync"
)

// DefaultCacheSize is the size NewCache uses when given a size <= 0.
const DefaultCacheSize = 1024

// Cache memoizes Compile by source text. It holds at most size entries and
// evicts the least recently used one. Compile errors are cached too: they
// depend only on the source text. Safe for concurrent use.
type Cache struct {
	mu    sync.Mutex
	size  int
	ll    *list.List // of *cacheEntry, most recently used first
	items map[string]*list.Element
}

type cacheEntry struct {
	src   string
	prog  *Program
	value *ValueProgram
	err   error
}

// NewCache returns a cache holding at most size programs (DefaultCacheSize
// when size <= 0).
func NewCache(size int) *Cache {
	if size <= 0 {
		size = DefaultCacheSize
	}
	return &Cache{size: size, ll: list.New(), items: make(map[string]*list.Element)}
}

// Get returns the compiled program for src, compiling it on a miss. The
// same *Program (or the same error) is returned for the same src while it
// stays in the cache.
func (c *Cache) Get(src string) (*Program, error) {
	c.mu.Lock()
	if el, ok := c.items[src]; ok {
		c.ll.MoveToFront(el)
		e := el.Value.(*cacheEntry)
		c.mu.Unlock()
		return e.prog, e.err
	}
	c.mu.Unlock()

	// Compile outside the lock; concurrent misses on the same source may
	// compile twice, but the first stored result wins.
	prog, err := Compile(src)

	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[src]; ok {
		c.ll.MoveToFront(el)
		e := el.Value.(*cacheEntry)
		return e.prog, e.err
	}
	c.items[src] = c.ll.PushFront(&cacheEntry{src: src, prog: prog, err: err})
	for c.ll.Len() > c.size {
		oldest := c.ll.Back()
		c.ll.Remove(oldest)
		delete(c.items, oldest.Value.(*cacheEntry).src)
	}
	return prog, err
}

// valuePrefix keeps value programs apart from predicates of the same source in the one LRU.
const valuePrefix = "value\x00"

// GetValue is Get for CompileValue: the compiled value program for src, compiled on a miss.
func (c *Cache) GetValue(src string) (*ValueProgram, error) {
	key := valuePrefix + src
	c.mu.Lock()
	if el, ok := c.items[key]; ok {
		c.ll.MoveToFront(el)
		e := el.Value.(*cacheEntry)
		c.mu.Unlock()
		return e.value, e.err
	}
	c.mu.Unlock()
	prog, err := CompileValue(src)
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		c.ll.MoveToFront(el)
		e := el.Value.(*cacheEntry)
		return e.value, e.err
	}
	c.items[key] = c.ll.PushFront(&cacheEntry{src: key, value: prog, err: err})
	for c.ll.Len() > c.size {
		oldest := c.ll.Back()
		c.ll.Remove(oldest)
		delete(c.items, oldest.Value.(*cacheEntry).src)
	}
	return prog, err
}

// Len returns the number of cached entries.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ll.Len()
}
