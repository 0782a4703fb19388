module github.com/dryexec/dryexec

go 1.26.8

require (
	github.com/aymanbagabas/go-udiff v0.4.2
	github.com/fatih/color v1.19.0
	github.com/mattn/go-isatty v0.0.20
	github.com/moby/sys/mountinfo v0.7.3
	github.com/santhosh-tekuri/jsonschema/v6 v6.0.3
	golang.org/x/sys v0.50.0
)

require (
	github.com/mattn/go-colorable v0.1.14 // indirect
	golang.org/x/text v0.14.0 // indirect
)
