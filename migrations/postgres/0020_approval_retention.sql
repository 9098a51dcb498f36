-- An approval's arguments as the caller gave them (`call_arguments`, secrets unmasked)
-- are kept only while its call may still run: they went when the approval was used,
-- but stayed for good on one denied or expired whose call was never made again. They go
-- now with the decision or the expiry (the store's statements); here, for the approvals
-- already settled so.
update approval set call_arguments = null
where status in ('denied', 'expired') and call_arguments is not null;
