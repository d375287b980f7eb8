"""The cluster, reached from the controller: the real ``kubectl`` client, and verify's read of
what the API server shows of every planned host."""
