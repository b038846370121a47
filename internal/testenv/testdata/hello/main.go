// Command hello is the binary that testenv's tests build with Build.
package main

import "fmt"

func main() { fmt.Println("hello from a built binary") }
