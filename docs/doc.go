// Package docs holds aiod's documentation; its test checks the links.
package docs
