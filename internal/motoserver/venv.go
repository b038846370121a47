package motoserver

// VenvProgram returns the path of the program name in the project's virtual
// environment, where `make deps` installs what the machine lacks (.venv/bin
// under the root of the module holding the working directory), or "" when
// it is not there. internal/samdeploy finds the venv's python with it.
func VenvProgram(name string) string { return venvProgram(name) }
