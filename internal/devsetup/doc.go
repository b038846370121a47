// Package devsetup holds no code: its tests check the repository's set-up,
// what a new user meets first. scripts/venv-install, which `make` uses to
// install moto_server and cfn-lint into the project's .venv when the machine
// lacks them, and the Makefile targets that must refuse to run wrongly.
package devsetup
