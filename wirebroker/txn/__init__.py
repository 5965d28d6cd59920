"""The transaction coordinator: `__transaction_state`, transactional ids and their markers."""
