module memfleet/interop

go 1.21

require (
	github.com/QuangTung97/go-memcache v0.3.5
	github.com/bradfitz/gomemcache v0.0.0-20260422231931-4d751bb6e37c
)
