package main

// version and commit name the build in the manager's and the gateway's start log. make image sets them at link
// time (-ldflags "-X main.version=0.1.0 -X main.commit=<git commit>") and puts the same values into the image's
// org.opencontainers.image.version and .revision labels; a plain go build leaves these defaults.
var (
	version = "devel"
	commit  = "unknown"
)
