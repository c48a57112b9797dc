"""The scheduling verbs' Kubernetes side: the Binding of a bind, the touch that requeues a pod."""
