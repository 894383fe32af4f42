// Pins crane (go-containerregistry), which tools/image.sh uses to assemble rotor's container
// image without a Docker daemon: it appends a layer tarball to an empty base, sets the config
// (user, entrypoint, labels) and writes the image as files. Nothing of its source lives here:
// only this pin and tools.go, which keeps the pin's dependencies in go.sum.
module rotor.dev/tools/crane

go 1.26.0

require github.com/google/go-containerregistry v0.22.1

require (
	github.com/docker/cli v29.7.2+incompatible // indirect
	github.com/docker/docker-credential-helpers v0.9.3 // indirect
	github.com/google/go-cmp v0.7.0 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/klauspost/compress v1.19.2 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	github.com/sirupsen/logrus v1.9.4 // indirect
	github.com/spf13/cobra v1.10.2 // indirect
	github.com/spf13/pflag v1.0.10 // indirect
	golang.org/x/sync v0.22.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
	gotest.tools/v3 v3.5.2 // indirect
)
