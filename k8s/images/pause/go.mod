module rtslice.dev/k8s-pause

go 1.24.0
