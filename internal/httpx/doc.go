// Package httpx holds small HTTP helpers shared by the runtime's servers (the OpenAI API and the gateway).
package httpx
